/**
 * The clusters of kernels this server does not run (another server's, jupyter_client's): the discovery records are
 * the user's, so every server sees them, but each server shows as its own only its kernels' clusters. The others
 * are listed folded, each with where its kernel runs, so that the user can find it (and stop it there); so are the
 * processes of those kernels that hold GPU memory (the user's, not others' work, but not this server's notebooks').
 */
import { formatBytes } from '../format';
import { holderGpuLabel } from './panelModel';
import type { IClusterElsewhere, IHolder } from '../types';

/** "1 cluster of a kernel this server does not run", "2 clusters of kernels this server does not run". */
export function elsewhereSummary(clusters: readonly IClusterElsewhere[]): string {
  return clusters.length === 1
    ? '1 cluster of a kernel this server does not run'
    : `${clusters.length} clusters of kernels this server does not run`;
}

/**
 * Where a cluster's kernel runs: "kernel 1a2b3c4d, pid 4242 on gpu-node-2, connection file kernel-1a2b….json", or
 * for a kernel no server id names (jupyter_client's own): "a kernel with no server id, pid 4242 on gpu-node-2,
 * connection file tmpqc6nlsg9.json".
 */
export function elsewhereWhere(cluster: IClusterElsewhere): string {
  const who = cluster.kernel_id ? `kernel ${cluster.kernel_id.slice(0, 8)}` : 'a kernel with no server id';
  const host = cluster.host ? ` on ${cluster.host}` : '';
  const file = cluster.connection_file ? `, connection file ${cluster.connection_file}` : '';
  return `${who}, pid ${cluster.pid}${host}${file}`;
}

/** One line of the fold: "train · cpu · 2 workers · tcp://127.0.0.1:8786". */
export function elsewhereLine(cluster: IClusterElsewhere): string {
  const workers = `${cluster.workers} worker${cluster.workers === 1 ? '' : 's'}`;
  return `${cluster.name} \u00b7 ${cluster.kind} \u00b7 ${workers} \u00b7 ${cluster.scheduler_address}`;
}

/** "1 process of a kernel this server does not run holds 2.0 GiB", "3 processes of kernels ... hold 6.0 GiB". */
export function elsewhereHoldersSummary(holders: readonly IHolder[]): string {
  const held = formatBytes(holders.reduce((total, holder) => total + (holder.used_memory ?? 0), 0));
  const pids = new Set(holders.map(holder => `${holder.host ?? ''}/${holder.pid}`)).size;
  return pids === 1
    ? `1 process of a kernel this server does not run holds ${held}`
    : `${pids} processes of kernels this server does not run hold ${held}`;
}

/** One process's line: "GPU 1 · pid 4242 · kernel 1a2b3c4d (its gpu worker) · 2.0 GiB". */
export function elsewhereHolderLine(holder: IHolder): string {
  const kernel = holder.kernel_id ? `kernel ${holder.kernel_id.slice(0, 8)}` : 'a kernel with no server id';
  const role = holder.role === 'worker' ? ` (its ${holder.cluster ?? 'cluster'} worker)` : holder.role === 'child' ? ' (its child)' : '';
  return `${holderGpuLabel(holder)} \u00b7 pid ${holder.pid} \u00b7 ${kernel}${role} \u00b7 ${formatBytes(holder.used_memory)}`;
}
