import {
  GpuPanelModel,
  holderGpuLabel,
  holderRole,
  holderSourceTag,
  ModelChange,
  ownerLabel
} from '../src/model/panelModel';
import type { IHolder, IServerConfig } from '../src/types';
import { cluster as clusterFixture, holder as holderFixture, reading, snapshot } from './fixtures';

function config(overrides: Partial<IServerConfig> = {}): IServerConfig {
  const base = { interval: 1000, slow_interval: 2000, history: 600, source: 'fake' };
  return { ...base, cpu_cluster: '%gpucluster --cpu-workers 2', gpu_packages: false, ...overrides };
}

describe('GpuPanelModel', () => {
  it('keeps one view per GPU with its latest reading and series', () => {
    const model = new GpuPanelModel({ maxPoints: 10 });
    model.applySnapshot(snapshot(1, [reading(0), reading(1, { gpu_util: 80 })]));
    model.applySnapshot(snapshot(2, [reading(0, { gpu_util: 70 }), reading(1)]));
    expect(model.gpus.map(g => g.reading.index)).toEqual([0, 1]);
    expect(model.gpus[0]?.util.values()).toEqual([50, 70]);
    expect(model.gpus[1]?.util.values()).toEqual([80, 50]);
    expect(model.gpus[0]?.memory.values()).toEqual([25, 25]);
    expect(model.lastTime).toBe(2);
  });

  it('stays bounded however many snapshots arrive', () => {
    const model = new GpuPanelModel({ maxPoints: 5 });
    for (let t = 1; t <= 10000; t++) {
      model.applySnapshot(snapshot(t, [reading(0, { gpu_util: t % 100 })]));
    }
    const view = model.gpus[0];
    expect(view?.util.size).toBe(5);
    expect(view?.times.values()).toEqual([9996, 9997, 9998, 9999, 10000]);
  });

  it('skips snapshots it already has (history after a reconnect)', () => {
    const model = new GpuPanelModel();
    const changes: ModelChange[] = [];
    model.changed.connect((_, change) => changes.push(change));
    model.applySnapshot(snapshot(5, [reading(0)]));
    model.applyHistory([snapshot(3, [reading(0)]), snapshot(5, [reading(0)]), snapshot(6, [reading(0)])]);
    expect(model.gpus[0]?.times.values()).toEqual([5, 6]);
    model.applyHistory([snapshot(4, [reading(0)])]);
    expect(changes).toEqual(['snapshot', 'snapshot']);
  });

  it('drops GPUs that went away and keeps null values as gaps', () => {
    const model = new GpuPanelModel();
    model.applySnapshot(snapshot(1, [reading(0), reading(1)]));
    model.applySnapshot(snapshot(2, [reading(1, { gpu_util: null, memory_total: null })]));
    expect(model.gpus.map(g => g.reading.index)).toEqual([1]);
    const values = model.gpus[0]?.util.values() ?? [];
    expect(values[1]).toBeNaN();
    expect(model.gpus[0]?.memory.values()[1]).toBeNaN();
  });

  it('says why GPUs are unavailable', () => {
    const model = new GpuPanelModel();
    expect(model.unavailableReason).toBeNull();
    model.applySnapshot(snapshot(1, [], 'NVIDIA driver not loaded'));
    expect(model.unavailableReason).toBe('NVIDIA driver not loaded');
    model.applySnapshot(snapshot(2, []));
    expect(model.unavailableReason).toBe('No GPUs found on the server.');
    model.applySnapshot(snapshot(3, [reading(0)]));
    expect(model.unavailableReason).toBeNull();
  });

  it('tracks the connection state and the confirmed interval', () => {
    const model = new GpuPanelModel();
    expect(model.connection.phase).toBe('idle');
    model.setConnection({ phase: 'reconnecting', attempt: 2, retryAt: 10, error: 'lost' });
    model.setConnection({ phase: 'open', attempt: 0, retryAt: null, error: null });
    expect(model.connection).toEqual({ phase: 'open', attempt: 0, retryAt: null, error: null });
    model.setConfig(config({ source: 'fake' }), 1000);
    model.setInterval(250);
    expect(model.interval).toBe(250);
    expect(model.config?.source).toBe('fake');
  });

  it('hints plain %gpucluster only where it starts: real GPUs with CuPy and dask-cuda', () => {
    const model = new GpuPanelModel();
    expect(model.startClusterCommand).toBe('%gpucluster --cpu-workers 2'); // nothing known yet
    model.setConfig(config({ source: 'nvml', gpu_packages: true }));
    model.applySnapshot(snapshot(1, [reading(0)]));
    expect(model.startClusterCommand).toBe('%gpucluster');
    model.setConfig(config({ source: 'nvml', gpu_packages: false, cpu_cluster: '%gpucluster --cpu-workers 1' }));
    expect(model.startClusterCommand).toBe('%gpucluster --cpu-workers 1');
    model.setConfig(config({ source: 'fake', gpu_packages: true })); // simulated GPUs: CPU workers
    expect(model.startClusterCommand).toBe('%gpucluster --cpu-workers 2');
    const empty = new GpuPanelModel();
    empty.setConfig(config({ source: 'nvml', gpu_packages: true }));
    empty.applySnapshot(snapshot(1, [], 'no NVIDIA driver is installed here'));
    expect(empty.startClusterCommand).toBe('%gpucluster --cpu-workers 2');
  });

  it('sorts clusters by start time and keeps the last list on error', () => {
    const model = new GpuPanelModel();
    const cluster = (name: string, started_at: number) => clusterFixture({ name, started_at });
    model.setClusters([cluster('b', 2), cluster('a', 1)]);
    expect(model.clusters.map(c => c.name)).toEqual(['a', 'b']);
    model.setClusters(model.clusters, 'server unreachable');
    expect(model.clusters).toHaveLength(2);
    expect(model.clustersError).toBe('server unreachable');
  });

  it('totals GPU memory by notebook, largest first', () => {
    const model = new GpuPanelModel();
    const holder = (pid: number, gpu: number, used: number, path: string | null, kernel: string | null): IHolder =>
      holderFixture({ pid, gpu, gpu_uuid: `GPU-${gpu}`, used_memory: used, kernel_id: kernel, path });
    model.setHolders({
      time: 1,
      status: null,
      unreadable_gpus: [3],
      others: [],
      reporting_kernels: [],
      processes: [
        holder(10, 0, 5, 'a.ipynb', 'k1'),
        holder(11, 1, 7, 'a.ipynb', 'k1'),
        holder(20, 1, 20, null, 'abcdef123456'),
        holder(30, 2, 1, null, null)
      ]
    });
    expect(model.memoryByOwner().map(o => [o.owner, o.bytes])).toEqual([
      ['kernel abcdef12', 20],
      ['a.ipynb', 12],
      ['pid 30', 1]
    ]);
    expect(model.unreadableGpus).toEqual([3]);
    expect(ownerLabel(holder(1, 0, 0, 'x.ipynb', 'k'))).toBe('x.ipynb');
    // a process of no notebook: its pid, and on its line whose it is (where the server can see it)
    const other = (yours: boolean | null): IHolder =>
      holderFixture({ pid: 4000, kernel_id: null, path: null, role: 'other', yours });
    expect(ownerLabel(other(false))).toBe('pid 4000');
    expect(holderRole(other(false))).toBe('another user\u2019s process');
    expect(holderRole(other(true))).toBe('yours, not a notebook\u2019s');
    expect(holderRole(other(null))).toBe('not a notebook\u2019s');
  });
});

describe('GpuPanelModel.starting', () => {
  it('is true for the server placeholder before the first GPU read, false after', () => {
    const model = new GpuPanelModel();
    expect(model.starting).toBe(false);
    model.applySnapshot(snapshot(1, [], 'starting: the first GPU read is under way'));
    expect(model.starting).toBe(true);
    expect(model.unavailableReason).toBe('starting: the first GPU read is under way');
    model.applySnapshot(snapshot(2, [reading(0)]));
    expect(model.starting).toBe(false);
    expect(model.unavailableReason).toBeNull();
    expect(model.gpus).toHaveLength(1);
  });
});

describe('GpuPanelModel.noGpu', () => {
  it('is the normal no-GPU state once the server has sampled, not while it starts', () => {
    const model = new GpuPanelModel();
    expect(model.noGpu).toBe(false);
    model.applySnapshot(snapshot(1, [], 'starting: the first GPU read is under way'));
    expect(model.noGpu).toBe(false);
    model.applySnapshot(snapshot(2, [], 'no NVIDIA driver is installed here'));
    expect(model.noGpu).toBe(true);
    expect(model.unavailableReason).toBe('no NVIDIA driver is installed here');
    model.applySnapshot(snapshot(3, [reading(0)]));
    expect(model.noGpu).toBe(false);
  });
});

describe('holder rows', () => {
  it('tag where each row comes from', () => {
    expect(holderSourceTag(holderFixture({ source: 'nvml' })).text).toBe('NVML');
    expect(holderSourceTag(holderFixture({ source: 'self-report' })).text).toBe('self-report');
    expect(holderSourceTag(holderFixture({ source: 'nvml+self-report' })).text).toBe('both');
    expect(holderSourceTag(holderFixture({ source: 'nvml+self-report' })).title).toMatch(/NVML/);
  });

  it('name the GPU with its host and the cluster worker', () => {
    const remote = holderFixture({
      gpu: 1,
      gpu_label: '127.0.0.2 \u00b7 GPU 1',
      host: '127.0.0.2',
      role: 'worker',
      cluster: 'big',
      worker: 'tcp://127.0.0.2:40123',
      source: 'self-report'
    });
    expect(holderGpuLabel(remote)).toBe('127.0.0.2 \u00b7 GPU 1');
    expect(holderRole(remote)).toBe('big worker tcp://127.0.0.2:40123');
    expect(holderRole(holderFixture({ role: 'worker', worker: null, pid: 7 }))).toBe('cluster worker 7');
    expect(holderRole(holderFixture())).toBe('kernel');
    expect(holderRole(holderFixture({ role: 'other', pid: 42, yours: false }))).toBe('another user\u2019s process');
    expect(holderRole(holderFixture({ role: 'child', pid: 43 }))).toBe('child pid 43'); // the kernel's, as /metrics says
    expect(holderGpuLabel(holderFixture({ gpu: 3, gpu_label: '' }))).toBe('GPU 3');
  });
});

describe('GpuPanelModel.holders', () => {
  it('lists this host first, then by host and GPU, the largest holder first', () => {
    const model = new GpuPanelModel();
    const at = (host: string | null, gpu: number, used: number) =>
      holderFixture({ host, gpu, used_memory: used, pid: used });
    model.setHolders({
      time: 1,
      status: null,
      unreadable_gpus: [],
      others: [],
      reporting_kernels: [],
      processes: [at('127.0.0.2', 0, 1), at(null, 1, 2), at('127.0.0.1', 1, 3), at('127.0.0.1', 0, 4), at(null, 1, 5)]
    });
    expect(model.holders.map(h => h.pid)).toEqual([5, 2, 4, 3, 1]);
  });
});
