import type {
  ICluster,
  IClusterElsewhere,
  IClusterFacts,
  IClusterMember,
  IGpuReading,
  IHolder,
  IIdleHold,
  ILeftover,
  IMemberGpu,
  IProcessesReply,
  ISnapshot
} from '../src/types';

export function reading(
  index: number,
  overrides: Partial<IGpuReading> = {}
): IGpuReading {
  return {
    index,
    nvml_index: index,
    name: 'NVIDIA H200',
    uuid: `GPU-${index}`,
    memory_total: 100,
    memory_used: 25,
    gpu_util: 50,
    memory_util: 10,
    temperature: 40,
    power: 100,
    power_limit: 700,
    sm_clock: 1500,
    pcie_rx: null,
    pcie_tx: null,
    nvlink_rx: null,
    nvlink_tx: null,
    processes: [],
    mig_parent: null,
    error: null,
    host: null,
    ...overrides
  };
}

export function snapshot(
  time: number,
  gpus: IGpuReading[],
  status: string | null = null
): ISnapshot {
  return {
    time,
    gpus,
    host: { cpu_percent: 5, memory_used: 1, memory_total: 2, cpu_count: 2 },
    status
  };
}

export function memberGpu(
  host: string,
  index: number,
  overrides: Partial<IMemberGpu> = {}
): IMemberGpu {
  return {
    index: 0,
    nvml_index: index,
    uuid: `GPU-${host}-${index}`,
    name: 'NVIDIA H200',
    label: `${host} \u00b7 GPU ${index}`,
    memory_total: 150754820096,
    memory_used: 72156033024,
    gpu_util: 87,
    process_memory: 4294967296,
    process_memory_source: 'cupy',
    error: null,
    array_memory: null,
    cached_memory: null,
    context_memory: null,
    others: null,
    ...overrides
  };
}

export function member(
  name: string,
  host: string,
  gpus: IMemberGpu[],
  overrides: Partial<IClusterMember> = {}
): IClusterMember {
  return {
    name,
    address: `tcp://${host}:40000`,
    host,
    host_label: host,
    pid: 100,
    role: 'worker',
    gpus,
    time: 1700000000,
    ...overrides
  };
}

/** What the manager of a CPU cluster started in the notebook says of it (Python's LocalManager.facts). */
export function facts(overrides: Partial<IClusterFacts> = {}): IClusterFacts {
  return {
    owned: true,
    ends: 'close',
    scalable: true,
    restartable: true,
    source: 'started here',
    taken: 'up since',
    title: 'CPU cluster',
    workers: 'cpu',
    parkable: false,
    ...overrides
  };
}

/** What each manager says of its cluster, as Python's managers do (tests/test_cluster_view.py checks theirs). */
export function factsOf(kind: string, label: string | null = null): IClusterFacts {
  switch (kind) {
    case 'gpu':
      return facts({ title: 'GPU cluster', workers: 'gpu', parkable: true });
    case 'slurm':
      return facts({ title: 'SLURM', source: 'from SLURM jobs', workers: 'gpu' });
    case 'gateway':
      return facts({ title: 'Dask Gateway', source: `from ${label ?? 'Dask Gateway'}`, workers: 'gpu' });
    case 'attached':
      return facts({
        owned: false,
        ends: 'detach',
        scalable: false,
        restartable: false,
        source: 'attached, not started here',
        taken: 'attached at',
        title: 'attached',
        workers: 'unknown'
      });
    case 'adopted':
      return facts({
        owned: false,
        ends: 'detach',
        restartable: false,
        source: `adopted ${label ?? 'cluster manager'}, not started here`,
        taken: 'adopted at',
        title: label ?? 'cluster manager',
        workers: 'unknown'
      });
    default:
      return facts();
  }
}

export function cluster(overrides: Partial<ICluster> = {}): ICluster {
  return {
    name: 'c',
    scheduler_address: 'tcp://127.0.0.1:8786',
    dashboard_url: 'http://127.0.0.1:8787/status',
    dashboard_link: null,
    dashboard_note: null,
    members: [],
    kind: 'cpu',
    workers: 2,
    gpus: [],
    pid: 1,
    kernel_id: 'k',
    started_at: 1,
    version: 1,
    path: 'a.ipynb',
    kernel_running: true,
    idle_timeout: null,
    idle_since: null,
    plain_cells: null,
    manager: null,
    jobs: [],
    adaptive: null,
    up_since: null,
    facts: factsOf(overrides.kind ?? 'cpu', overrides.manager ?? null),
    connection_file: 'kernel-k.json',
    host: 'gpu-node-1',
    ...overrides
  };
}

/** A cluster of a kernel the server does not run, as `GET clusters` lists it under `elsewhere`. */
export function elsewhere(overrides: Partial<IClusterElsewhere> = {}): IClusterElsewhere {
  return {
    name: 'other',
    kind: 'cpu',
    workers: 2,
    scheduler_address: 'tcp://127.0.0.1:8790',
    started_at: 1,
    pid: 4242,
    host: 'gpu-node-2',
    connection_file: 'tmpqc6nlsg9.json',
    kernel_id: null,
    notebook: null,
    server: null,
    ...overrides
  };
}

export function holder(overrides: Partial<IHolder> = {}): IHolder {
  return {
    pid: 10,
    gpu: 0,
    gpu_uuid: 'GPU-0',
    used_memory: 1024,
    kernel_id: 'k1',
    path: 'a.ipynb',
    cluster: null,
    role: 'kernel',
    gpu_label: 'GPU 0',
    host: null,
    worker: null,
    source: 'nvml',
    array_memory: null,
    cached_memory: null,
    context_memory: null,
    server: null,
    user: null,
    yours: null,
    top_names: [],
    sm_util: null,
    memory_cap: null,
    memory_cap_by: null,
    ...overrides
  };
}

/** A GET processes reply: no holder, no GPU others use, no kernel that reports, unless `overrides` say. */
export function processesReply(overrides: Partial<IProcessesReply> = {}): IProcessesReply {
  return {
    time: 1,
    status: null,
    processes: [],
    elsewhere: [],
    unreadable_gpus: [],
    others: [],
    reporting_kernels: [],
    ...overrides
  };
}

export function leftover(pid: number, overrides: Partial<ILeftover> = {}): ILeftover {
  return {
    pid,
    started: 1700000000.25 + pid,
    name: 'python',
    kernel_id: 'dead-kernel',
    gpu: 1,
    gpu_uuid: 'GPU-1',
    gpu_label: 'GPU 1',
    used_memory: 4 * 2 ** 30,
    ...overrides
  };
}

export function idleHold(kernelId: string, overrides: Partial<IIdleHold> = {}): IIdleHold {
  return {
    kernel_id: kernelId,
    path: 'train.ipynb',
    held: 11 * 2 ** 30,
    cached: 2 ** 30,
    gpus: ['GPU 0'],
    cluster: 'c',
    idle_s: 1920,
    line:
      'holds 11.0 GiB on GPU 0, idle for 32 min: free cached memory (%gpucluster free) or stop the cluster ' +
      '(%gpucluster stop)',
    ...overrides
  };
}
