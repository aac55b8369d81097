/** What the server sends (see gpu_magics/server): plain JSON shapes, no behaviour. */

export interface IGpuProcess {
  pid: number;
  used_memory: number | null;
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
}

export interface ICluster {
  name: string;
  scheduler_address: string;
  dashboard_url: string | null;
  kind: string;
  workers: number;
  gpus: string[];
  pid: number;
  kernel_id: string | null;
  started_at: number;
  /** The schema version of the cluster's discovery record. */
  version: number;
  path: string | null;
  kernel_running: boolean;
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
}

export interface IProcessesReply {
  time: number | null;
  status: string | null;
  processes: IHolder[];
  unreadable_gpus: number[];
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
