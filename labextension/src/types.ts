/** What the server sends (see gpu_magics/server): plain JSON shapes, no behaviour. */

export interface IGpuProcess {
  pid: number;
  used_memory: number | null;
  /** Percent of the GPU's time its kernels ran lately, from NVML's samples; null where NVML cannot say. */
  sm_util: number | null;
}

export interface IGpuReading {
  index: number;
  nvml_index: number | null;
  name: string;
  uuid: string;
  memory_total: number | null;
  memory_used: number | null;
  gpu_util: number | null;
  memory_util: number | null;
  temperature: number | null;
  power: number | null;
  power_limit: number | null;
  sm_clock: number | null;
  pcie_rx: number | null;
  pcie_tx: number | null;
  nvlink_rx: number | null;
  nvlink_tx: number | null;
  processes: IGpuProcess[] | null;
  mig_parent: string | null;
  error: string | null;
  /** The host it was read on when a cluster worker reported it; null for this server's host. */
  host: string | null;
}

export interface IHostReading {
  cpu_percent: number | null;
  memory_used: number | null;
  memory_total: number | null;
  cpu_count: number;
}

export interface ISnapshot {
  time: number;
  gpus: IGpuReading[];
  host: IHostReading;
  status: string | null;
}

export interface IServerConfig {
  interval: number;
  slow_interval: number;
  history: number;
  source: string;
  /** The command that starts a CPU cluster on this machine ("%gpucluster --cpu-workers 2"). */
  cpu_cluster: string;
  /** Whether CuPy and dask-cuda are installed (plain %gpucluster needs them and real GPUs). */
  gpu_packages: boolean;
}

/** One GPU a cluster worker uses, as the worker reported it about itself (live). */
export interface IMemberGpu {
  /** Index within the worker's CUDA_VISIBLE_DEVICES. */
  index: number;
  /** The GPU's number on its host (as nvidia-smi counts), where known. */
  nvml_index: number | null;
  uuid: string;
  name: string;
  /** "127.0.0.2 · GPU 1": host and GPU, as every view names it. */
  label: string;
  memory_total: number | null;
  memory_used: number | null;
  gpu_util: number | null;
  /** Bytes the worker process itself holds on this GPU (its CuPy/RMM pool, or NVML's figure for its pid). */
  process_memory: number | null;
  /** Where process_memory came from: 'cupy', 'rmm', 'nvml' or null. */
  process_memory_source: string | null;
  /** Why this GPU could not be read (it is shown as unreadable). */
  error: string | null;
  /** Of process_memory: in use by arrays (null where the process does not say). */
  array_memory: number | null;
  /** Of process_memory: cached by its memory pool, free to give back ("Free cached"). */
  cached_memory: number | null;
  /** Of process_memory: its CUDA context and libraries. */
  context_memory: number | null;
  /** Memory that processes other than this cluster's and its kernel's hold on this GPU; null when none. */
  others: IOtherUse | null;
}

/** What processes that are not the user's notebooks (nor their clusters) hold on a GPU. */
export interface IOtherUse {
  /** Bytes they hold. */
  bytes: number;
  /** Their process ids, where NVML names them (empty: memory in use that no process of the user reports). */
  pids: number[];
  /** 'nvml' (from NVML's list of processes) or 'unexplained' (memory no self-report explains). */
  how: string;
  /** How many of them NVML lists without their memory. */
  unknown: number;
}

/** IOtherUse on one of this server's GPUs. */
export interface IGpuOtherUse {
  gpu: number;
  gpu_uuid: string;
  /** "GPU 0", as every view names it. */
  gpu_label: string;
  bytes: number;
  pids: number[];
  how: string;
  unknown: number;
}

/** One worker of a cluster and its GPUs, from the telemetry it streams to the kernel. */
export interface IClusterMember {
  name: string;
  address: string;
  /** The host part of the worker's address. */
  host: string;
  /** The host as shown: its hostname where that is unique in the cluster, else its address. */
  host_label: string;
  pid: number | null;
  /** 'kernel' for the kernel's own process, else 'worker'. */
  role: string;
  gpus: IMemberGpu[];
  /** When the worker's last reading was taken (seconds since the epoch). */
  time: number | null;
}

/** One batch job (SLURM) that gives a cluster workers, as the queue and the scheduler see it. */
export interface IClusterJob {
  job_id: string;
  /** The queue's word, lower case: 'pending', 'running', 'completing', 'failed', ... */
  state: string;
  /** Where it runs; null while pending. */
  node: string | null;
  /** Why it waits ('Resources', 'Priority'), or null. */
  reason: string | null;
  /** The names of its workers that are up. */
  workers: string[];
  /** The GPUs of those workers, as they reported them. */
  gpus: string[];
}

/** What a cluster's manager says of it (Python's info.ClusterFacts): the panel reads these, never `kind`. */
export interface IClusterFacts {
  /** The notebook's kernel made it: stop, the idle timeout and the kernel's end close it. */
  owned: boolean;
  /** What stop and the idle timeout do to it: close it, or only detach the notebook from it. */
  ends: 'close' | 'detach';
  /** Scale and Adapt act on its workers. */
  scalable: boolean;
  /** Restart restarts its workers from the notebook. */
  restartable: boolean;
  /** Where its workers come from, in words: "started here", "attached, not started here", ... */
  source: string;
  /** How the notebook took it, before its clock: "up since", "attached at", ... */
  taken: string;
  /** What gives the workers, in a word or two: "GPU cluster", "SLURM", "Dask Gateway", ... */
  title: string;
  /** What its workers are. */
  workers: 'gpu' | 'cpu' | 'unknown';
  /** Park (`%gpucluster park`) gives its workers' GPUs back from the notebook; absent in an older kernel's record. */
  parkable?: boolean;
}

export interface ICluster {
  name: string;
  scheduler_address: string;
  dashboard_url: string | null;
  /** The dashboard link for this browser (through jupyter-server-proxy where the server has it). */
  dashboard_link: string | null;
  /** Why dashboard_link may not open from the browser, or null. */
  dashboard_note: string | null;
  /** The workers (and the kernel itself, role 'kernel') with their GPUs, live. */
  members: IClusterMember[];
  kind: string;
  workers: number;
  gpus: string[];
  pid: number;
  kernel_id: string | null;
  started_at: number;
  /** The schema version of the cluster's discovery record. */
  version: number;
  /** Seconds without a task before the cluster closes (an attached one is detached); null: never. */
  idle_timeout: number | null;
  /** Since when it has run no task (seconds since the epoch); null while it runs one. */
  idle_since: number | null;
  /** The session backend the notebook's plain cells run on (`%gpurun multi-gpu`); null: dask's own settings. */
  plain_cells: string | null;
  /** What gives the workers ('SLURM jobs', 'KubeCluster', ...) for --slurm and --from; null otherwise. */
  manager: string | null;
  /** The batch jobs behind the workers (--slurm). */
  jobs: IClusterJob[];
  /** [MIN, MAX] while the cluster adapts between MIN and MAX workers; null otherwise. */
  adaptive: number[] | null;
  /** When the cluster itself started, where it ran before the notebook took it (a gateway cluster it connected
   * to); its age is told from this. null: it started with the notebook's line (started_at). */
  up_since: number | null;
  /** What its manager says of it; null in the record of an older kernel (then nothing is offered). */
  facts: IClusterFacts | null;
  /** Its kernel's connection file's name ("kernel-<id>.json"); null in an older kernel's record. */
  connection_file: string | null;
  /** The host its kernel runs on; null in an older kernel's record. */
  host: string | null;
  /** Its GPU workers parked (`%gpucluster park`); null (or absent, in an older kernel's record) while they run. */
  parked?: IClusterParked | null;
  path: string | null;
  kernel_running: boolean;
}

/** A parked cluster: its GPU workers gave their GPUs back to the server; their data waits in host memory. */
export interface IClusterParked {
  /** Since when (seconds since the epoch). */
  since: number;
  /** The GPU memory its workers gave back, held in host memory while they are parked. */
  bytes: number;
  /** How many workers are parked. */
  workers: number;
}

/** A cluster of a kernel this server does not run (another server's, or jupyter_client's): where that kernel is. */
export interface IClusterElsewhere {
  name: string;
  kind: string;
  workers: number;
  scheduler_address: string;
  started_at: number;
  /** The kernel's process. */
  pid: number;
  /** The host the kernel runs on; null in an older kernel's record. */
  host: string | null;
  /** The kernel's connection file's name ("kernel-<id>.json", "tmpab12.json"); null where unknown. */
  connection_file: string | null;
  /** Its kernel id, where its connection file names one (another server's kernel); null otherwise. */
  kernel_id: string | null;
  /** The notebook its kernel runs for (relative to its server's root), where the kernel's environment says. */
  notebook: string | null;
  /** The URL of the Jupyter server that runs its kernel, where one does on this host. */
  server: string | null;
}

/** `GET clusters`: this server's kernels' clusters, and the user's other kernels' (shown folded). */
export interface IClustersReply {
  clusters: ICluster[];
  elsewhere: IClusterElsewhere[];
}

export interface IHolder {
  pid: number;
  gpu: number;
  gpu_uuid: string;
  used_memory: number | null;
  kernel_id: string | null;
  path: string | null;
  cluster: string | null;
  role: 'kernel' | 'worker' | 'child' | 'other';
  /** Host and GPU as every view names it ("127.0.0.2 · GPU 1", or "GPU 0" on this host). */
  gpu_label: string;
  /** The host the process runs on, null for this server's host. */
  host: string | null;
  /** The cluster worker's name, where the process is one. */
  worker: string | null;
  /** Where the row comes from: NVML's process list, the process's own report, or both agreeing. */
  source: 'nvml' | 'self-report' | 'nvml+self-report';
  /** Of used_memory, as the process says: in use by arrays (null where unknown). */
  array_memory: number | null;
  /** Cached by its memory pool: what "Free cached" gives back. */
  cached_memory: number | null;
  /** Its CUDA context and libraries. */
  context_memory: number | null;
  /** The URL of the Jupyter server that runs its kernel, where another one on this host does (`elsewhere`). */
  server: string | null;
  /** The account a process no kernel of the user's holds (role "other") runs as, where the server can see it. */
  user: string | null;
  /** Whether that account is the server's; null where the process cannot be seen (gone, another container). */
  yours: boolean | null;
  /** A kernel's biggest names on this GPU, from its own record (`%gpumemory` lists them all); empty elsewhere. */
  top_names: ITopName[];
  /** Percent of the GPU's time the process's kernels ran lately (NVML's samples); null: not measured. */
  sm_util: number | null;
  /**
   * Bytes: the GPU memory cap of the notebook that owns the process, on its GPU (the same on every row of that
   * notebook and GPU: its kernel, its cluster's workers, its children); null where no cap applies.
   */
  memory_cap: number | null;
  /** Who set memory_cap: 'server' (c.GpuMagicsServer.memory_cap), 'notebook' (`%gpumemory --cap`); null: none. */
  memory_cap_by: 'server' | 'notebook' | null;
}

/** One name that holds a kernel's GPU memory, as `%gpumemory` lists it. */
export interface ITopName {
  /** The variable (or `Out[3]`, or the last error's frame). */
  name: string;
  /** What it holds: "CuPy array 4096 x 4096 float64", "PyTorch module 4 tensors". */
  what: string;
  bytes: number;
  /** What gives it back: "del x", "%reset -f out". */
  give_back: string;
}

export interface IProcessesReply {
  time: number | null;
  status: string | null;
  processes: IHolder[];
  /** The processes of the user's kernels that this server does not run (another server's, jupyter_client's). */
  elsewhere?: IHolder[];
  unreadable_gpus: number[];
  /** This server's GPUs on which others (not the user's notebooks) hold memory. */
  others: IGpuOtherUse[];
  /** Running kernels that report their own GPU memory (gpu_magics loaded): they can free what they cache. */
  reporting_kernels: string[];
}

/** A process on one of this server's GPUs whose kernel has ended (`GET api/leftovers`). */
export interface ILeftover {
  pid: number;
  /** Its start time (seconds since the epoch): sent back with the pid, so a reused pid is never ended. */
  started: number;
  name: string;
  /** The kernel that started it. */
  kernel_id: string;
  gpu: number;
  gpu_uuid: string;
  /** "GPU 0", as every view names it. */
  gpu_label: string;
  /** Bytes it holds (NVML's figure); null where NVML cannot tell. */
  used_memory: number | null;
}

export interface ILeftoversReply {
  time: number;
  leftovers: ILeftover[];
  /** One line per GPU: "left by a kernel that has ended: 3 processes hold 11.0 GiB on GPU 1". */
  summary: string[];
}

/** What `POST api/leftovers/end` did to one process asked for. */
export interface IEndedLeftover {
  pid: number;
  ended: boolean;
  /** Why it was left alone, or null. */
  reason: string | null;
}

/** `POST api/leftovers/end`: what was done, and what is left (as `GET api/leftovers` says it). */
export interface IEndLeftoversReply {
  results: IEndedLeftover[];
  time: number;
  leftovers: ILeftover[];
  summary: string[];
}

/** What a running kernel holds on GPUs that sit idle (`GET api/idle-hold`). */
export interface IIdleHold {
  kernel_id: string;
  path: string | null;
  /** Bytes it holds: its own process, its cluster's workers and its ranks. */
  held: number;
  /** Of those, cached by memory pools (freeing cached memory gives it back). */
  cached: number;
  /** Where, as every view names them: "GPU 0", "gpu-node-1 \u00b7 GPU 2". */
  gpus: string[];
  /** The cluster it started (stopping it gives its workers' memory back), or null. */
  cluster: string | null;
  /** Seconds its GPUs have sat idle; null while they work. */
  idle_s: number | null;
  /** Once idle for warning_min: what it holds and the actions that give it back; else null. */
  line: string | null;
}

export interface IIdleHoldReply {
  /** When the figures were sampled; null before the first sample. */
  time: number | null;
  warning_min: number;
  kernels: IIdleHold[];
}

export type ServerMessage =
  | {
      type: 'hello';
      config: IServerConfig;
      interval: number;
      snapshot: ISnapshot;
    }
  | { type: 'snapshot'; snapshot: ISnapshot }
  | { type: 'configured'; interval: number }
  | { type: 'pong' }
  | { type: 'error'; message: string };
