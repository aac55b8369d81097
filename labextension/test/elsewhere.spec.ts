import {
  elsewhereHolderLine,
  elsewhereHoldersSummary,
  elsewhereHolderWhere,
  elsewhereLine,
  elsewhereSummary,
  elsewhereWhere
} from '../src/model/elsewhere';
import { GpuPanelModel } from '../src/model/panelModel';
import { cluster, elsewhere, holder, processesReply } from './fixtures';

describe('elsewhereSummary', () => {
  it('counts the clusters of kernels the server does not run', () => {
    expect(elsewhereSummary([elsewhere()])).toBe('1 cluster of a kernel this server does not run');
    expect(elsewhereSummary([elsewhere(), elsewhere({ name: 'b' })])).toBe(
      '2 clusters of kernels this server does not run'
    );
  });
});

describe('elsewhereWhere', () => {
  it('says where a kernel with no server id runs: its pid, host and connection file', () => {
    expect(elsewhereWhere(elsewhere())).toBe(
      'a kernel with no server id, pid 4242 on gpu-node-2, connection file tmpqc6nlsg9.json'
    );
  });

  it('names another server\u2019s kernel by its id, and leaves out what an older record does not say', () => {
    const other = elsewhere({ kernel_id: '1a2b3c4d-0000-4000-8000-000000000000', host: null, connection_file: null });
    expect(elsewhereWhere(other)).toBe('kernel 1a2b3c4d, pid 4242');
  });

  it('names the notebook and the server of a kernel where its environment says', () => {
    const kernel = { kernel_id: '1a2b3c4d-0000-4000-8000-000000000000', host: 'gpu-node-1' };
    const placed = elsewhere({ ...kernel, notebook: 'train.ipynb', server: 'http://127.0.0.1:8890/' });
    expect(elsewhereWhere(placed)).toBe('train.ipynb on the server at http://127.0.0.1:8890/ (kernel 1a2b3c4d, pid 4242)');
    expect(elsewhereWhere(elsewhere({ notebook: '/home/u/run.ipynb' }))).toBe(
      '/home/u/run.ipynb (a kernel with no server id, pid 4242)'
    );
  });
});

describe('elsewhereLine', () => {
  it('says the cluster, its kind, its workers and its scheduler', () => {
    expect(elsewhereLine(elsewhere())).toBe('other \u00b7 cpu \u00b7 2 workers \u00b7 tcp://127.0.0.1:8790');
    expect(elsewhereLine(elsewhere({ workers: 1, kind: 'gpu' }))).toBe(
      'other \u00b7 gpu \u00b7 1 worker \u00b7 tcp://127.0.0.1:8790'
    );
  });
});

describe('GpuPanelModel.setClusters', () => {
  it('keeps the clusters elsewhere apart, oldest first, and keeps them through a failed refresh', () => {
    const model = new GpuPanelModel();
    model.setClusters([cluster({ name: 'mine' })], null, [elsewhere({ name: 'b', started_at: 5 }), elsewhere({ name: 'a', started_at: 2 })]);
    expect(model.clusters.map(c => c.name)).toEqual(['mine']);
    expect(model.clustersElsewhere.map(c => c.name)).toEqual(['a', 'b']);
    model.setClusters(model.clusters, 'the server did not answer');
    expect(model.clustersElsewhere.map(c => c.name)).toEqual(['a', 'b']);
    model.setClusters([], null, []);
    expect(model.clustersElsewhere).toEqual([]);
  });
});

describe('the processes of kernels this server does not run', () => {
  it('are summed up in one line, counted by process', () => {
    const two = [
      holder({ pid: 7, used_memory: 2 ** 30, kernel_id: null, role: 'kernel' }),
      holder({ pid: 7, gpu: 1, gpu_label: 'GPU 1', used_memory: 2 ** 30, kernel_id: null, role: 'kernel' }),
      holder({ pid: 8, used_memory: 2 ** 31, kernel_id: 'feedbeef-2', path: null, role: 'worker', cluster: 'big' })
    ];
    expect(elsewhereHoldersSummary(two)).toBe('2 processes of kernels this server does not run hold 4.0 GiB');
    expect(elsewhereHoldersSummary(two.slice(0, 1))).toBe('1 process of a kernel this server does not run holds 1.0 GiB');
  });

  it('say their GPU, pid and memory, and under it their kernel and part', () => {
    const worker = holder({ pid: 8, used_memory: 2 ** 31, kernel_id: 'feedbeef-2', path: null, role: 'worker', cluster: 'big' });
    expect(elsewhereHolderLine(worker)).toBe('GPU 0 \u00b7 pid 8 \u00b7 2.0 GiB');
    expect(elsewhereHolderWhere(worker)).toBe('kernel feedbeef (its big worker)');
    expect(elsewhereHolderWhere(holder({ pid: 9, kernel_id: null, path: null, role: 'child' }))).toBe(
      'a kernel with no server id (its child)'
    );
  });

  it('name their kernel\u2019s notebook and its server where they are known', () => {
    const worker = holder({ pid: 8, kernel_id: 'feedbeef-2', role: 'worker', cluster: 'big' });
    const placed = { ...worker, path: 'train.ipynb', server: 'http://127.0.0.1:8890/' };
    expect(elsewhereHolderWhere(placed)).toBe('train.ipynb (its big worker) on the server at http://127.0.0.1:8890/');
    expect(elsewhereHolderWhere({ ...placed, role: 'kernel', server: null })).toBe('train.ipynb');
  });

  it('come apart from the server\u2019s own holders in the model', () => {
    const model = new GpuPanelModel();
    model.setHolders(processesReply({ processes: [holder({ pid: 1 })], elsewhere: [holder({ pid: 2, kernel_id: null })] }));
    expect(model.memoryByOwner().flatMap(owner => owner.holders.map(h => h.pid))).toEqual([1]);
    expect(model.holdersElsewhere.map(h => h.pid)).toEqual([2]);
  });
});
