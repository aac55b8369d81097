import type { IGpuReading, ISnapshot } from '../src/types';

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
