/**
 * The clusters of kernels this server does not run (another server's, jupyter_client's): the discovery records are
 * the user's, so every server sees them, but each server shows as its own only its kernels' clusters. The others
 * are listed folded, each with where its kernel runs, so that the user can find it (and stop it there).
 */
import type { IClusterElsewhere } from './types';

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
