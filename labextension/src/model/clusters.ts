/**
 * Cluster buttons act through the kernel that started the cluster: the panel runs `%gpucluster ...` there,
 * so that kernel stays the cluster's one owner.
 */
import type { Kernel, KernelMessage } from '@jupyterlab/services';

import { formatBytes, formatDuration } from '../format';
import type { ICluster, IClusterFacts, IClusterMember, IMemberGpu } from '../types';

export type ClusterAction =
  | { action: 'stop' }
  | { action: 'restart' }
  | { action: 'scale'; workers: number }
  | { action: 'adapt'; minimum: number; maximum: number }
  | { action: 'free' }
  | { action: 'park' }
  | { action: 'resume' };

/** What a notebook's "Free cached" runs in its kernel: the kernel's pools and its cluster's give back their cache. */
export const FREE_NOTEBOOK_COMMAND = '%gpucluster free';

/** The magic line for an action (validated: a scale needs a whole number of workers >= 1). */
export function clusterCommand(request: ClusterAction): string {
  switch (request.action) {
    case 'stop':
      return '%gpucluster stop';
    case 'restart':
      return '%gpucluster restart';
    case 'scale':
      if (!Number.isInteger(request.workers) || request.workers < 1) {
        throw new Error('scale needs a whole number of workers, at least 1');
      }
      return `%gpucluster scale ${request.workers}`;
    case 'adapt': {
      const problem = adaptProblem(`${request.minimum} ${request.maximum}`);
      if (problem !== null) {
        throw new Error(problem);
      }
      return `%gpucluster adapt ${request.minimum} ${request.maximum}`;
    }
    case 'free':
      return '%gpucluster free workers';
    case 'park':
      return '%gpucluster park';
    case 'resume':
      return '%gpucluster resume';
  }
}

/**
 * Run `code` silently in the running kernel `kernelId`; resolves with the lines it said (its displays' and prints'
 * text: a silent request's output goes to no cell, so the caller shows them); rejects with the kernel's error, if any.
 */
export async function runInKernel(
  kernels: Kernel.IManager,
  kernelId: string,
  code: string,
  missing = 'The kernel that started this cluster is not running on this server.'
): Promise<string[]> {
  await kernels.refreshRunning();
  const model = Array.from(kernels.running()).find(k => k.id === kernelId);
  if (model === undefined) {
    throw new Error(missing);
  }
  const kernel = kernels.connectTo({ model, handleComms: false });
  const said: string[] = [];
  try {
    const future = kernel.requestExecute({
      code,
      silent: true,
      store_history: false,
      stop_on_error: false
    });
    future.onIOPub = message => {
      said.push(...saidLines(message));
    };
    const reply = (await future.done) as KernelMessage.IExecuteReplyMsg;
    const content = reply.content;
    if (content.status === 'error') {
      throw new Error(`${content.ename}: ${content.evalue}`);
    }
    if (content.status !== 'ok') {
      throw new Error(`the kernel answered ${content.status}`);
    }
    return said;
  } finally {
    kernel.dispose();
  }
}

/** The lines an iopub message shows: a display's text, or printed text (stdout only), one entry a line. */
export function saidLines(message: KernelMessage.IIOPubMessage): string[] {
  const content = message.content as { name?: string; text?: string; data?: Record<string, unknown> };
  let text = '';
  if (message.header.msg_type === 'stream' && content.name === 'stdout') {
    text = content.text ?? '';
  } else if (message.header.msg_type === 'display_data' || message.header.msg_type === 'execute_result') {
    const plain = content.data?.['text/plain'];
    text = typeof plain === 'string' ? plain : '';
  }
  return text
    .split('\n')
    .map(line => line.trim())
    .filter(line => line.length > 0);
}

// -- naming and grouping (pure: what the panel shows) ---------------------------------------------------

function plural(count: number, noun: string): string {
  return `${count} ${noun}${count === 1 ? '' : 's'}`;
}

/** "4× NVIDIA H200", or "2× NVIDIA A100, 1× Tesla T4": GPU models counted in first-seen order. */
export function countModels(names: string[]): string {
  const counts = new Map<string, number>();
  for (const name of names) {
    counts.set(name, (counts.get(name) ?? 0) + 1);
  }
  return Array.from(counts, ([name, count]) => `${count}\u00d7 ${name}`).join(', ');
}

/** The members of a cluster, [] where the server does not send them (an older kernel's record). */
export function clusterMembers(cluster: ICluster): IClusterMember[] {
  return Array.isArray(cluster.members) ? cluster.members : [];
}

function workerGpuModels(cluster: ICluster): string[] {
  return clusterMembers(cluster)
    .filter(member => member.role !== 'kernel')
    .flatMap(member => member.gpus.map(gpu => gpu.name));
}

/** What a cluster's manager says of it; for the record of an older kernel, facts that offer no action. */
export function clusterFacts(cluster: ICluster): IClusterFacts {
  return (
    cluster.facts ?? {
      owned: false,
      ends: 'detach',
      scalable: false,
      restartable: false,
      source: '',
      taken: 'up since',
      title: 'cluster',
      workers: 'unknown'
    }
  );
}

/** Whether `gpus` are the CUDA devices the workers were given ("0", "GPU-…", "MIG-…"), not GPU models. */
function areDevices(gpus: string[]): boolean {
  return gpus.length > 0 && gpus.every(gpu => /^(\d+|GPU-|MIG-)/.test(gpu));
}

/**
 * What a cluster row says it is, from what its manager says (the title) and what its workers report:
 * "CPU cluster · 2 workers", "GPU cluster · 4× NVIDIA H200", "attached · 4× NVIDIA H200 on 2 hosts",
 * "SLURM · 2× NVIDIA H200 · 2 workers · 2 jobs (1 pending)" (the scheduler's address is on the row's next line).
 */
export function clusterTitle(cluster: ICluster): string {
  const title = clusterFacts(cluster).title;
  const workers = plural(cluster.workers, 'worker');
  const reported = workerGpuModels(cluster);
  const models = reported.length ? reported : areDevices(cluster.gpus) ? [] : cluster.gpus;
  const jobs = cluster.jobs ?? [];
  if (jobs.length) {
    const pending = jobs.filter(job => job.state === 'pending').length;
    const waiting = pending ? ` (${pending} pending)` : '';
    const gpus = models.length ? `${countModels(models)} \u00b7 ` : '';
    return `${title} \u00b7 ${gpus}${workers} \u00b7 ${plural(jobs.length, 'job')}${waiting}`;
  }
  if (models.length) {
    const hosts = new Set(
      clusterMembers(cluster)
        .filter(m => m.role !== 'kernel' && m.gpus.length > 0)
        .map(m => m.host)
    );
    const where = hosts.size > 1 ? ` on ${hosts.size} hosts` : '';
    return `${title} \u00b7 ${countModels(models)}${where}`;
  }
  if (areDevices(cluster.gpus)) {
    return `${title} \u00b7 ${workers} on GPU ${cluster.gpus.join(', ')}`;
  }
  return `${title} \u00b7 ${workers}`;
}

export interface IHostGroup {
  /** The host as shown (hostname where unique, else address). */
  host: string;
  members: IClusterMember[];
}

/** Members grouped by host in first-seen order; the kernel's own process comes first within its host. */
export function membersByHost(members: IClusterMember[]): IHostGroup[] {
  const groups = new Map<string, IClusterMember[]>();
  for (const member of members) {
    const host = member.host_label || member.host || member.address;
    const group = groups.get(host) ?? [];
    group.push(member);
    groups.set(host, group);
  }
  const kernelFirst = (a: IClusterMember, b: IClusterMember) =>
    Number(b.role === 'kernel') - Number(a.role === 'kernel');
  return Array.from(groups, ([host, group]) => ({ host, members: [...group].sort(kernelFirst) }));
}

/** "GPU 1": a member GPU's label without the host, which its host heading already says. */
export function gpuShortLabel(gpu: IMemberGpu): string {
  const parts = gpu.label.split(' \u00b7 ');
  return parts[parts.length - 1] || `GPU ${gpu.nvml_index ?? gpu.index}`;
}

/** What a member with no GPU line says: before its first report, or a worker without a GPU. */
export function memberWithoutGpus(member: IClusterMember): string {
  return member.time === null ? 'waiting for its first report' : 'no GPU';
}

/** The worker as its lines name it: "kernel" for the kernel's process, else the worker's name. */
export function memberName(member: IClusterMember): string {
  return member.role === 'kernel' ? 'kernel' : member.name;
}

/** A worker name that is only an id (a Dask Gateway worker's 32 hex digits, a UUID). */
const OPAQUE_NAME = /^(?:[0-9a-f]{24,}|[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12})$/;

/**
 * The name each member's lines show: `memberName`, except that workers named by an id are "worker 1", "worker 2"...
 * in the order of their addresses (the id stays in the line's tooltip), as the kernel's cluster card names them.
 */
export function memberNames(members: IClusterMember[]): Map<IClusterMember, string> {
  const names = new Map(members.map(member => [member, memberName(member)] as [IClusterMember, string]));
  const opaque = members
    .filter(member => member.role !== 'kernel' && OPAQUE_NAME.test(member.name))
    .sort((a, b) => (a.address < b.address ? -1 : a.address > b.address ? 1 : 0));
  opaque.forEach((member, index) => names.set(member, `worker ${index + 1}`));
  return names;
}

/**
 * What the card's buttons do here, said beside them: Stop closes a cluster the notebook made, Detach lets go of one
 * it did not (it keeps running); why Restart is off where it is.
 */
export function buttonsHint(facts: IClusterFacts): string {
  const stop =
    facts.ends === 'detach'
      ? 'Detach lets go of the cluster; it keeps running.'
      : 'Stop closes the cluster and gives its GPUs back.';
  return facts.restartable ? stop : `${stop} ${restartOff(facts)}`;
}

/** Why Restart is off for a cluster whose manager does not allow it. */
export function restartOff(facts: IClusterFacts): string {
  return facts.owned
    ? 'No Restart: its workers are not restarted from here.'
    : 'No Restart: only the notebook that started it can restart its workers.';
}

/** What the cluster's workers cache in their pools, summed; null when no worker says. */
export function clusterCached(cluster: ICluster): number | null {
  let cached: number | null = null;
  for (const member of clusterMembers(cluster)) {
    if (member.role === 'kernel') {
      continue;
    }
    for (const gpu of member.gpus) {
      if (gpu.cached_memory !== null && gpu.cached_memory !== undefined) {
        cached = (cached ?? 0) + gpu.cached_memory;
      }
    }
  }
  return cached;
}

/**
 * The idle timeout's line: "closes after 30 min without a task", and while idle "idle 5 min · closes in 25 min"
 * ("detaches" where the notebook did not make it); null without a timeout.
 */
export function idleText(cluster: ICluster, now: number): string | null {
  const timeout = cluster.idle_timeout ?? null;
  if (timeout === null) {
    return null;
  }
  const verb = clusterFacts(cluster).ends === 'detach' ? 'detaches' : 'closes';
  const since = cluster.idle_since ?? null;
  if (since === null) {
    return `${verb} after ${formatDuration(timeout)} without a task`;
  }
  const left = Math.max(0, since + timeout - now);
  return `idle ${formatDuration(now - since)} \u00b7 ${verb} in ${formatDuration(left)}`;
}

/**
 * The park's line: "parked 12 min · 9.0 GiB kept in host memory · the next cell that sends it work resumes it";
 * null while its workers run.
 */
export function parkedText(cluster: ICluster, now: number): string | null {
  const parked = cluster.parked ?? null;
  if (parked === null) {
    return null;
  }
  return (
    `parked ${formatDuration(Math.max(0, now - parked.since))} \u00b7 ${formatBytes(parked.bytes)} kept in host ` +
    'memory \u00b7 the next cell that sends it work resumes it'
  );
}

/** 'busy' (it runs tasks), 'idle', or 'closing' (idle, with less than a quarter of the timeout or 5 min left). */
export function idleState(cluster: ICluster, now: number): 'busy' | 'idle' | 'closing' {
  const since = cluster.idle_since ?? null;
  const timeout = cluster.idle_timeout ?? null;
  if (since === null || timeout === null) {
    return 'busy';
  }
  const left = since + timeout - now;
  return left < Math.min(300, timeout / 4) ? 'closing' : 'idle';
}

// -- the Scale dialog ----------------------------------------------------------------------------

/** Why `text` is not a number of workers to scale to, or `null` when it is one. */
export function scaleProblem(text: string): string | null {
  const trimmed = text.trim();
  if (trimmed === '') {
    return 'Enter a number of workers, such as 2.';
  }
  const value = Number(trimmed);
  if (!Number.isFinite(value)) {
    return `\u201c${trimmed}\u201d is not a number: enter a whole number of workers, such as 2.`;
  }
  if (value < 1) {
    return 'A cluster needs at least 1 worker; to end it, use Stop.';
  }
  if (!Number.isInteger(value)) {
    return `Workers come whole: enter ${Math.floor(value)} or ${Math.ceil(value)}, not ${trimmed}.`;
  }
  return null;
}

/** The number of workers in `text`, or `null` when `scaleProblem` has something to say. */
export function parseWorkers(text: string): number | null {
  return scaleProblem(text) === null ? Number(text.trim()) : null;
}

// -- batch jobs and adapting -----------------------------------------------------------------------

/**
 * One line per batch job: "job 12 running on node-3 · GPUs NVIDIA H100 (node-3 · GPU 0)",
 * "job 13 pending (Resources)".
 */
export function jobLines(cluster: ICluster): string[] {
  return (cluster.jobs ?? []).map(job => {
    let line = `job ${job.job_id} ${job.state}`;
    if (job.node) {
      line += ` on ${job.node}`;
    }
    if (job.reason) {
      line += ` (${job.reason})`;
    }
    if (job.gpus.length) {
      line += ` \u00b7 GPUs ${job.gpus.join(', ')}`;
    } else if (job.workers.length) {
      line += ` \u00b7 ${plural(job.workers.length, 'worker')}`;
    }
    return line;
  });
}

/** "adapts between 0 and 8 workers", or `null` while the cluster does not adapt. */
export function adaptText(cluster: ICluster): string | null {
  const bounds = cluster.adaptive ?? null;
  return bounds === null ? null : `adapts between ${bounds[0]} and ${bounds[1]} workers`;
}

/** Why `text` is not "MIN MAX" for adapt, or `null` when it is. */
export function adaptProblem(text: string): string | null {
  const bounds = adaptBounds(text);
  if (bounds === null) {
    return 'Enter the least and the most workers, such as 0 8.';
  }
  const [minimum, maximum] = bounds;
  if (maximum < 1) {
    return 'The most workers must be at least 1; to end the cluster, use Stop.';
  }
  if (minimum > maximum) {
    return `The least (${minimum}) is more than the most (${maximum}).`;
  }
  return null;
}

/** [MIN, MAX] from `text`, or `null` when `adaptProblem` has something to say. */
export function parseAdapt(text: string): [number, number] | null {
  return adaptProblem(text) === null ? adaptBounds(text) : null;
}

function adaptBounds(text: string): [number, number] | null {
  const match = /^\s*(\d+)\s+(\d+)\s*$/.exec(text);
  return match ? [Number(match[1]), Number(match[2])] : null;
}
