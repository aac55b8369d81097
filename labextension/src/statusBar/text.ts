/** What the status-bar item says: pure functions of the server's readings and processes (no widget, no network). */
import { formatBytes, formatDuration } from '../format';
import type { ICluster, IGpuReading, IIdleHoldReply, IProcessesReply, ISnapshot } from '../types';

export interface IGpuStatus {
  /** "GPU 0-1 · 45% · 12.0 / 160 GiB", or "No GPU". */
  text: string;
  /** One line per GPU, for the tooltip. */
  title: string;
}

/**
 * What the item says about `readings` (the server's GPUs): those in `kernelGpus` (the indices the kernel in
 * front holds memory on) when it holds any, else all; mean utilization and memory used / total over them.
 */
export function gpuStatus(readings: IGpuReading[], kernelGpus: number[] | null): IGpuStatus {
  const local = readings.filter(r => r.host === null && r.error === null);
  const mine = kernelGpus?.length ? local.filter(r => kernelGpus.includes(r.index)) : [];
  const shown = mine.length ? mine : local;
  if (shown.length === 0) {
    return { text: 'No GPU', title: 'No GPU on this server: click for the GPU panel' };
  }
  const utils = shown.map(r => r.gpu_util).filter((u): u is number => u !== null);
  const util = utils.length ? `${Math.round(utils.reduce((a, b) => a + b, 0) / utils.length)}%` : '\u2013';
  const used = sum(shown.map(r => r.memory_used));
  const total = sum(shown.map(r => r.memory_total));
  const indices = shown.map(r => r.index);
  const label = indices.length === 1 ? `GPU ${indices[0]}` : `GPUs ${indices.join(',')}`;
  const whose = mine.length ? 'this notebook\u2019s kernel uses' : 'of this server';
  const lines = shown.map(
    r =>
      `GPU ${r.index} \u00b7 ${r.name}: ${r.gpu_util ?? '\u2013'}% busy, ` +
      `${formatBytes(r.memory_used)} / ${formatBytes(r.memory_total)}`
  );
  // GPUs alike: "2 × 140 GiB", as each card says, rather than a sum rounded on its own ("281 GiB")
  const totals = Array.from(new Set(shown.map(r => r.memory_total)));
  const each = totals.length === 1 ? totals[0] : null;
  const capacity =
    shown.length > 1 && each !== null && each !== undefined
      ? `${shown.length} \u00d7 ${formatBytes(each)}`
      : formatBytes(total);
  return {
    text: `${label} \u00b7 ${util} \u00b7 ${formatBytes(used)} / ${capacity}`,
    title: [`The GPUs ${whose} (click for the GPU panel):`, ...lines].join('\n')
  };
}

/** The server's GPU indices that kernel `kernelId` holds memory on (its own process, not its cluster's). */
export function kernelGpus(reply: IProcessesReply | null, kernelId: string | null): number[] | null {
  if (!reply || !kernelId) {
    return null;
  }
  const found = reply.processes.filter(p => p.kernel_id === kernelId && p.host === null).map(p => p.gpu);
  return Array.from(new Set(found)).sort((a, b) => a - b);
}

function sum(values: (number | null)[]): number | null {
  const known = values.filter((v): v is number => v !== null);
  return known.length ? known.reduce((a, b) => a + b, 0) : null;
}

/** The snapshot the item shows: `incoming` when it is newer than `current` (the panel's 1 s feed, or a poll). */
export function newerSnapshot(current: ISnapshot | null, incoming: ISnapshot): ISnapshot {
  if (current === null || incoming.time > current.time || (current.gpus.length === 0 && incoming.gpus.length)) {
    return incoming;
  }
  return current;
}

/** What the item adds where GPU memory is held while idle: a short suffix, and the lines for its tooltip. */
export interface IIdleHoldStatus {
  /** " · held idle 32 min" (the kernel in front), " · 2 notebooks hold idle GPUs" (others), or ''. */
  suffix: string;
  /** "notebook.ipynb holds 11.0 GiB on GPU 0, idle for 32 min: ...", one per kernel; [] when none. */
  lines: string[];
}

/** Says so where kernels hold GPU memory on idle GPUs long enough (the server's `line`), the one in front first. */
export function idleHoldStatus(reply: IIdleHoldReply | null, kernelId: string | null): IIdleHoldStatus {
  const warned = (reply?.kernels ?? []).filter(hold => hold.line);
  if (!warned.length) {
    return { suffix: '', lines: [] };
  }
  const front = warned.find(hold => hold.kernel_id === kernelId);
  const ordered = front ? [front, ...warned.filter(hold => hold !== front)] : warned;
  const lines = ordered.map(hold => `${hold.path ?? `kernel ${hold.kernel_id.slice(0, 8)}`} ${hold.line}`);
  const suffix = front
    ? ` \u00b7 held idle ${formatDuration(front.idle_s ?? 0)}`
    : ` \u00b7 ${warned.length === 1 ? '1 notebook holds' : `${warned.length} notebooks hold`} idle GPUs`;
  return { suffix, lines };
}

/** What the item adds where the notebook in front has its cluster parked: a short suffix, and its tooltip line. */
export interface IParkedStatus {
  /** " · parked" (the kernel in front's cluster), or ''. */
  suffix: string;
  /** "Cluster 'gpu' is parked (12 min): 9.0 GiB kept in host memory; ...", or null. */
  line: string | null;
}

/** Says so where the cluster of the kernel in front (`kernelId`) is parked (`%gpucluster park`). */
export function parkedStatus(clusters: ICluster[] | null, kernelId: string | null, now: number): IParkedStatus {
  const front = (clusters ?? []).find(cluster => cluster.kernel_id === kernelId && cluster.parked);
  const parked = front?.parked;
  if (!kernelId || !front || !parked) {
    return { suffix: '', line: null };
  }
  const workers = parked.workers === 1 ? '1 worker' : `${parked.workers} workers`;
  return {
    suffix: ' \u00b7 parked',
    line:
      `Cluster '${front.name}' is parked (${formatDuration(Math.max(0, now - parked.since))}): its ${workers} gave ` +
      `their GPUs back, ${formatBytes(parked.bytes)} kept in host memory; the next cell that sends it work ` +
      'resumes it (%gpucluster resume: now).'
  };
}
