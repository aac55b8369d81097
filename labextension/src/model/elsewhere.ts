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
 * Which notebook and server a kernel belongs to, where its environment said: "train.ipynb on the server at
 * http://127.0.0.1:8890/", "train.ipynb", "the server at http://127.0.0.1:8890/"; '' where neither is known.
 */
export function kernelPlace(notebook: string | null | undefined, server: string | null | undefined): string {
  const at = server ? `the server at ${server}` : '';
  return notebook ? `${notebook}${at ? ` on ${at}` : ''}` : at;
}

/**
 * Where a cluster's kernel runs: "train.ipynb on the server at http://127.0.0.1:8890/ (kernel 1a2b3c4d, pid 4242)",
 * where the kernel's environment says; else "kernel 1a2b3c4d, pid 4242 on gpu-node-2, connection file
 * kernel-1a2b….json", or for a kernel no server id names (jupyter_client's own): "a kernel with no server id, pid
 * 4242 on gpu-node-2, connection file tmpqc6nlsg9.json".
 */
export function elsewhereWhere(cluster: IClusterElsewhere): string {
  const who = cluster.kernel_id ? `kernel ${cluster.kernel_id.slice(0, 8)}` : 'a kernel with no server id';
  const host = cluster.host ? ` on ${cluster.host}` : '';
  const place = kernelPlace(cluster.notebook, cluster.server);
  if (place) {
    return `${place} (${who}, pid ${cluster.pid})`;
  }
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

/** One process's line: "GPU 1 · pid 4242 · 2.0 GiB" (the note under it says whose it is). */
export function elsewhereHolderLine(holder: IHolder): string {
  return `${holderGpuLabel(holder)} \u00b7 pid ${holder.pid} \u00b7 ${formatBytes(holder.used_memory)}`;
}

/**
 * Under a process's line, whose it is: "train.ipynb (its big worker) on the server at http://127.0.0.1:8890/", its
 * kernel named where its notebook is not known ("kernel 1a2b3c4d", "a kernel with no server id").
 */
export function elsewhereHolderWhere(holder: IHolder): string {
  const kernel = holder.path
    ? holder.path
    : holder.kernel_id
      ? `kernel ${holder.kernel_id.slice(0, 8)}`
      : 'a kernel with no server id';
  const role = holder.role === 'worker' ? ` (its ${holder.cluster ?? 'cluster'} worker)` : holder.role === 'child' ? ' (its child)' : '';
  return `${kernel}${role}${holder.server ? ` on the server at ${holder.server}` : ''}`;
}
