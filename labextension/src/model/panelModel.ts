/**
 * The side panel's state, free of any view or network code: snapshots in, per-GPU series out (bounded),
 * the clusters kernels started, who holds GPU memory, and the state of the connection.
 */
import { ISignal, Signal } from '@lumino/signaling';

import { formatBytes, memoryPercent } from '../format';
import { Ring } from './ring';
import type {
  ICluster,
  IClusterElsewhere,
  IGpuOtherUse,
  IGpuReading,
  IHolder,
  IHostReading,
  IIdleHold,
  IIdleHoldReply,
  ILeftover,
  ILeftoversReply,
  IProcessesReply,
  IServerConfig,
  ISnapshot
} from '../types';

/** `forbidden`: the server refused this user (401/403); no retry until the user asks for one. */
export type ConnectionPhase =
  | 'idle'
  | 'connecting'
  | 'open'
  | 'reconnecting'
  | 'forbidden';

/** What the panel says when the server refuses it. */
export function forbiddenMessage(status: number): string {
  return `The server refused the GPU panel (${status}): sign in again or reload the page.`;
}

export interface IConnectionState {
  phase: ConnectionPhase;
  /** Failed attempts since the last open connection. */
  attempt: number;
  /** When the next attempt is due (ms since the epoch), while reconnecting; `null` when none is (forbidden). */
  retryAt: number | null;
  /** Why the last attempt or connection failed. */
  error: string | null;
}

export interface IGpuView {
  reading: IGpuReading;
  /** Utilization (%) over time, oldest first; NaN where unknown. */
  util: Ring;
  /** Memory in use (% of total) over time. */
  memory: Ring;
  /** Sample times (seconds since the epoch). */
  times: Ring;
}

export interface IOwnerTotal {
  /** The notebook path, else "kernel <id>", else "pid <n>". */
  owner: string;
  kernelId: string | null;
  bytes: number;
  holders: IHolder[];
  /** What the owner's processes (its kernel, its cluster's workers) cache in their memory pools; null: none says. */
  cached: number | null;
  /** Its kernel runs on this server and reports its own memory: "Free cached" can run there. */
  canFree: boolean;
  /** Where a memory cap applies to it: one entry per GPU, ordered like the GPUs; [] when none does. */
  caps: IOwnerCap[];
}

/** What a notebook holds on one GPU against its memory cap there. */
export interface IOwnerCap {
  /** "GPU 0", "127.0.0.2 \u00b7 GPU 1", as every view names it. */
  gpuLabel: string;
  gpuUuid: string;
  /** Bytes its processes on the GPU hold (its kernel, its cluster's workers, its children), added up. */
  used: number;
  /** Bytes: the cap. */
  cap: number;
  /** Who set it: the server's admin, or the notebook itself (`%gpumemory --cap`). */
  by: 'server' | 'notebook';
}

/** Where a holder's GPU is: its uuid, else its host and number (the same GPU on every row of it). */
function gpuKey(holder: IHolder): string {
  return holder.gpu_uuid || `${holder.host ?? ''}#${holder.gpu}`;
}

/** Orders GPUs as the panel lists them: this host's first, then by host, then by number. */
function compareGpus(a: IHolder, b: IHolder): number {
  return (a.host ?? '').localeCompare(b.host ?? '') || a.gpu - b.gpu;
}

/**
 * One notebook's memory against its cap, per GPU where any of its `holders` has a cap: what they hold there added
 * up, ordered like the GPUs. `holders` are one owner's; a GPU with no cap gets no entry.
 */
export function ownerCaps(holders: readonly IHolder[]): IOwnerCap[] {
  const capped = new Map<string, { first: IHolder; cap: IOwnerCap }>();
  for (const holder of holders) {
    if (holder.memory_cap === null || holder.memory_cap === undefined) {
      continue;
    }
    const key = gpuKey(holder);
    if (!capped.has(key)) {
      const cap: IOwnerCap = {
        gpuLabel: holderGpuLabel(holder),
        gpuUuid: holder.gpu_uuid,
        used: 0,
        cap: holder.memory_cap,
        by: holder.memory_cap_by ?? 'server'
      };
      capped.set(key, { first: holder, cap });
    }
  }
  for (const holder of holders) {
    const entry = capped.get(gpuKey(holder));
    if (entry) {
      entry.cap.used += holder.used_memory ?? 0;
    }
  }
  return Array.from(capped.values())
    .sort((a, b) => compareGpus(a.first, b.first))
    .map(entry => entry.cap);
}

/** A GPU's time by notebook: each owner's share (percent), largest first; `measured` false where NVML cannot say. */
export interface IGpuTime {
  measured: boolean;
  shares: { owner: string; percent: number }[];
}

/**
 * The time of the GPU the `holders` are on, by owner: the notebook (its kernel, workers and ranks added up), or
 * "others" for processes that are not the user's notebooks'. Not measured where NVML gave no process a figure, or
 * where a process of the user's is known only from its own report (NVML's pids are not this server's).
 */
export function gpuTime(holders: readonly IHolder[]): IGpuTime {
  const measured = holders.filter(holder => holder.sm_util !== null && holder.sm_util !== undefined);
  // a process of the user's that NVML does not list under its pid (a container: NVML gives the host's pids) would
  // have its time counted as someone else's: not measured, rather than wrong
  const unmapped = holders.some(holder => holder.source === 'self-report');
  if ((holders.length && !measured.length) || unmapped) {
    return { measured: false, shares: [] };
  }
  const totals = new Map<string, number>();
  for (const holder of measured) {
    const owner = holder.role === 'other' ? 'others' : ownerLabel(holder);
    totals.set(owner, (totals.get(owner) ?? 0) + (holder.sm_util ?? 0));
  }
  const shares = Array.from(totals, ([owner, percent]) => ({ owner, percent: Math.min(100, percent) }));
  return { measured: true, shares: shares.sort((a, b) => b.percent - a.percent || a.owner.localeCompare(b.owner)) };
}

/** How a GPU memory holder is named in the panel: its notebook, else its kernel, else its process ("pid 4000"). */
export function ownerLabel(holder: IHolder): string {
  if (holder.path) {
    return holder.path;
  }
  return holder.kernel_id ? `kernel ${holder.kernel_id.slice(0, 8)}` : `pid ${holder.pid}`;
}

/**
 * Whose a process no notebook holds is: "another user's process", "yours, not a notebook's", or, where the server
 * cannot see the process (gone, or in another container: NVML gives the host's pids), "not a notebook's".
 */
export function otherWhose(holder: IHolder): string {
  if (holder.yours === false) {
    return 'another user\u2019s process';
  }
  return holder.yours ? 'yours, not a notebook\u2019s' : 'not a notebook\u2019s';
}

/** The tag on a holder row saying where it comes from: NVML's process list, the process's own report, or both. */
export function holderSourceTag(holder: IHolder): { text: string; title: string } {
  switch (holder.source) {
    case 'nvml':
      return { text: 'NVML', title: 'From NVML\u2019s list of processes on the GPU' };
    case 'self-report':
      return { text: 'self-report', title: 'Reported by the process itself (NVML cannot see it from here)' };
    case 'nvml+self-report':
      return { text: 'both', title: 'Reported by the process itself and seen by NVML' };
    default:
      return { text: '', title: '' };
  }
}

/**
 * What others hold on a GPU, in words: "pid 4242 holds 40.0 GiB", "2 other processes hold 40.0 GiB (pid 4242,
 * 4343)", or "40.0 GiB in use that no process of yours reports" (as others_text in Python).
 */
export function othersText(use: { bytes: number; pids: number[] }): string {
  const pids = use.pids ?? [];
  if (pids.length === 0) {
    return `${formatBytes(use.bytes)} in use that no process of yours reports`;
  }
  if (pids.length === 1) {
    return `pid ${pids[0]} holds ${formatBytes(use.bytes)}`;
  }
  const listed = pids.slice(0, 4).join(', ') + (pids.length > 4 ? ', ...' : '');
  return `${pids.length} other processes hold ${formatBytes(use.bytes)} (pid ${listed})`;
}

/** "1.0 GiB arrays · 9.8 GiB cached · 512 MiB context": the parts a process says it holds; '' when none. */
export function splitText(
  arrays: number | null | undefined,
  cached: number | null | undefined,
  context: number | null | undefined
): string {
  const parts: [number | null | undefined, string][] = [
    [arrays, 'arrays'],
    [cached, 'cached'],
    [context, 'context']
  ];
  return parts
    .filter(([value]) => value !== null && value !== undefined)
    .map(([value, name]) => `${formatBytes(value as number)} ${name}`)
    .join(' \u00b7 ');
}

/** The GPU a holder uses, as every view names it ("127.0.0.2 \u00b7 GPU 1", or "GPU 0" on this host). */
export function holderGpuLabel(holder: IHolder): string {
  return holder.gpu_label || `GPU ${holder.gpu}`;
}

/**
 * Who holds the memory within its notebook: "kernel", "e2e worker tcp://\u2026", "child pid 42" (a process the kernel
 * started, as /metrics counts it: part "children"); for a process of no notebook (its title is its pid), whose it
 * is: "another user's process".
 */
export function holderRole(holder: IHolder): string {
  switch (holder.role) {
    case 'kernel':
      return 'kernel';
    case 'worker':
      return `${holder.cluster ?? 'cluster'} worker ${holder.worker ?? holder.pid}`;
    case 'child':
      return `child pid ${holder.pid}`;
    default:
      return otherWhose(holder);
  }
}

export type ModelChange =
  | 'snapshot'
  | 'clusters'
  | 'holders'
  | 'leftovers'
  | 'connection'
  | 'config';

/** One summary line of what ended kernels left on a GPU, and the processes it counts. */
export interface ILeftoverGroup {
  /** "left by a kernel that has ended: 3 processes hold 11.0 GiB on GPU 1", as the server says it. */
  line: string;
  gpuLabel: string;
  processes: ILeftover[];
}

/**
 * The server's summary lines, each with the processes it counts (those on the GPU the line names); a process
 * no line names gets a line of its own, so that none is listed without a way to end it.
 */
export function leftoverGroups(reply: ILeftoversReply): ILeftoverGroup[] {
  const byGpu = new Map<string, ILeftover[]>();
  for (const leftover of reply.leftovers) {
    const found = byGpu.get(leftover.gpu_label) ?? [];
    found.push(leftover);
    byGpu.set(leftover.gpu_label, found);
  }
  const groups: ILeftoverGroup[] = [];
  for (const line of reply.summary) {
    // the longest label the line ends with ("GPU 1" would also end "node · GPU 1")
    const label = Array.from(byGpu.keys())
      .filter(gpu => line.endsWith(` on ${gpu}`))
      .sort((a, b) => b.length - a.length)[0];
    if (label !== undefined) {
      groups.push({ line, gpuLabel: label, processes: byGpu.get(label) as ILeftover[] });
      byGpu.delete(label);
    }
  }
  for (const [label, processes] of byGpu) {
    const count = new Set(processes.map(p => p.pid)).size;
    const held = processes.reduce((total, p) => total + (p.used_memory ?? 0), 0);
    const who = count === 1 ? '1 process holds' : `${count} processes hold`;
    groups.push({ line: `left by a kernel that has ended: ${who} ${formatBytes(held)} on ${label}`, gpuLabel: label, processes });
  }
  return groups;
}

export class GpuPanelModel {
  readonly maxPoints: number;

  private _changed = new Signal<this, ModelChange>(this);
  private _gpus = new Map<string, IGpuView>();
  private _order: string[] = [];
  private _host: IHostReading | null = null;
  private _status: string | null = null;
  private _lastTime: number | null = null;
  private _lastSnapshot: ISnapshot | null = null;
  private _config: IServerConfig | null = null;
  private _interval: number | null = null;
  private _clusters: ICluster[] = [];
  private _elsewhere: IClusterElsewhere[] = [];
  private _clustersError: string | null = null;
  private _holders: IHolder[] = [];
  private _holdersElsewhere: IHolder[] = [];
  private _holdersTime: number | null = null;
  private _holdersRead = false;
  private _unreadable: number[] = [];
  private _others = new Map<number, IGpuOtherUse>();
  private _reporting = new Set<string>();
  private _leftovers: ILeftoverGroup[] = [];
  private _idleHolds = new Map<string, IIdleHold>();
  private _connection: IConnectionState = {
    phase: 'idle',
    attempt: 0,
    retryAt: null,
    error: null
  };

  constructor(options: { maxPoints?: number } = {}) {
    this.maxPoints = options.maxPoints ?? 300;
  }

  /** Emitted with what changed (a panel batches these into one render per frame). */
  get changed(): ISignal<this, ModelChange> {
    return this._changed;
  }

  // -- readings -----------------------------------------------------------------------------------

  /** The newest snapshot applied (the status-bar item follows it while the panel samples). */
  get lastSnapshot(): ISnapshot | null {
    return this._lastSnapshot;
  }

  get gpus(): IGpuView[] {
    return this._order.map(key => this._gpus.get(key) as IGpuView);
  }

  get host(): IHostReading | null {
    return this._host;
  }

  get lastTime(): number | null {
    return this._lastTime;
  }

  get config(): IServerConfig | null {
    return this._config;
  }

  /** The push interval the server confirmed for this panel (ms). */
  get interval(): number | null {
    return this._interval;
  }

  /** The server has started sampling and its first GPU read (seconds on a slow NVML) is under way. */
  get starting(): boolean {
    return this._order.length === 0 && (this._status?.startsWith('starting:') ?? false);
  }

  /**
   * The server samples, and there is no GPU to show (no NVML, no driver, or none found): on a laptop this is
   * the normal state, not an error. `unavailableReason` says why.
   */
  get noGpu(): boolean {
    return this._lastTime !== null && this._order.length === 0 && !this.starting;
  }

  /** Why no GPU can be shown, or `null` when there are GPUs to show. */
  get unavailableReason(): string | null {
    if (this._status) {
      return this._status;
    }
    if (this._lastTime !== null && this._order.length === 0) {
      return 'No GPUs found on the server.';
    }
    return null;
  }

  /** The command a CPU cluster starts with on the server's machine (the same N as the notebooks' hints). */
  get cpuClusterCommand(): string {
    return this._config?.cpu_cluster ?? '%gpucluster --cpu-workers 2';
  }

  /**
   * The command that starts a cluster on the server's machine: plain `%gpucluster` where it has real GPUs and
   * CuPy and dask-cuda, else the CPU cluster's (plain `%gpucluster` fails without GPUs, and on simulated ones).
   */
  get startClusterCommand(): string {
    const config = this._config;
    const gpuReady = config !== null && config.source === 'nvml' && config.gpu_packages && this._order.length > 0;
    return gpuReady ? '%gpucluster' : this.cpuClusterCommand;
  }

  setConfig(config: IServerConfig, interval?: number): void {
    this._config = config;
    if (interval !== undefined) {
      this._interval = interval;
    }
    this._changed.emit('config');
  }

  setInterval(interval: number): void {
    this._interval = interval;
    this._changed.emit('config');
  }

  /** Add many snapshots (history after a (re)connect), oldest first; repeated or older ones are skipped. */
  applyHistory(snapshots: ISnapshot[]): void {
    let applied = false;
    for (const snapshot of snapshots) {
      applied = this._apply(snapshot) || applied;
    }
    if (applied) {
      this._changed.emit('snapshot');
    }
  }

  applySnapshot(snapshot: ISnapshot): void {
    if (this._apply(snapshot)) {
      this._changed.emit('snapshot');
    }
  }

  private _apply(snapshot: ISnapshot): boolean {
    if (this._lastTime !== null && snapshot.time <= this._lastTime) {
      return false;
    }
    this._lastTime = snapshot.time;
    this._lastSnapshot = snapshot;
    this._host = snapshot.host;
    this._status = snapshot.status;
    const order: string[] = [];
    for (const reading of snapshot.gpus) {
      const key = reading.uuid || `#${reading.index}`;
      let view = this._gpus.get(key);
      if (view === undefined) {
        view = {
          reading,
          util: new Ring(this.maxPoints),
          memory: new Ring(this.maxPoints),
          times: new Ring(this.maxPoints)
        };
        this._gpus.set(key, view);
      }
      view.reading = reading;
      view.util.push(reading.gpu_util);
      view.memory.push(
        memoryPercent(reading.memory_used, reading.memory_total)
      );
      view.times.push(snapshot.time);
      order.push(key);
    }
    for (const key of this._order) {
      if (!order.includes(key)) {
        this._gpus.delete(key); // a GPU that went away (or a MIG layout change)
      }
    }
    this._order = order;
    return true;
  }

  // -- clusters and holders -----------------------------------------------------------------------

  get clusters(): ICluster[] {
    return this._clusters;
  }

  get clustersError(): string | null {
    return this._clustersError;
  }

  /** The clusters of kernels this server does not run (shown folded, with where they run). */
  get clustersElsewhere(): IClusterElsewhere[] {
    return this._elsewhere;
  }

  /** `elsewhere`: the user's other kernels' clusters; left as they were when not given (a failed refresh). */
  setClusters(clusters: ICluster[], error: string | null = null, elsewhere?: IClusterElsewhere[]): void {
    this._clusters = [...clusters].sort((a, b) => a.started_at - b.started_at);
    this._clustersError = error;
    if (elsewhere !== undefined) {
      this._elsewhere = [...elsewhere].sort((a, b) => a.started_at - b.started_at);
    }
    this._changed.emit('clusters');
  }

  get holders(): IHolder[] {
    return this._holders;
  }

  /** The processes of kernels this server does not run that hold GPU memory (shown folded). */
  get holdersElsewhere(): IHolder[] {
    return this._holdersElsewhere;
  }

  /** When the server last read which processes hold GPU memory (seconds since the epoch), or `null`. */
  get holdersTime(): number | null {
    return this._holdersTime;
  }

  /** Whether the server has read the processes yet (before that, "no process" would be a guess). */
  get holdersRead(): boolean {
    return this._holdersRead;
  }

  /**
   * This server's GPUs on which the processes' memory, as last read (every few seconds), adds up to more than
   * the GPU uses now (read every second): their figures are older than the cards'.
   */
  holdersAboveGpuUse(): number[] {
    const held = new Map<number, number>();
    for (const holder of this._holders) {
      if (holder.host === null && holder.used_memory !== null) {
        held.set(holder.gpu, (held.get(holder.gpu) ?? 0) + holder.used_memory);
      }
    }
    const above: number[] = [];
    for (const view of this.gpus) {
      const { index, memory_used: used } = view.reading;
      if (used !== null && (held.get(index) ?? 0) > used) {
        above.push(index);
      }
    }
    return above;
  }

  /** GPUs whose processes could not be read (no permission, not supported). */
  get unreadableGpus(): number[] {
    return this._unreadable;
  }

  setHolders(reply: IProcessesReply): void {
    // this host's GPUs first, then by host and GPU number, the largest holder first on each GPU
    this._holders = [...reply.processes].sort(
      (a, b) =>
        (a.host ?? '').localeCompare(b.host ?? '') ||
        a.gpu - b.gpu ||
        (b.used_memory ?? 0) - (a.used_memory ?? 0)
    );
    this._unreadable = reply.unreadable_gpus;
    this._holdersTime = reply.time;
    this._holdersRead = reply.time !== null;
    this._others = new Map((reply.others ?? []).map(use => [use.gpu, use]));
    this._reporting = new Set(reply.reporting_kernels ?? []);
    this._holdersElsewhere = reply.elsewhere ?? [];
    this._changed.emit('holders');
  }

  /** What others (not the user's notebooks) hold on this server's GPU `index`, or `null`. */
  othersOn(index: number): IGpuOtherUse | null {
    return this._others.get(index) ?? null;
  }

  /** Who used this server's GPU `index` lately, from NVML's per-process samples; `null` until processes are read. */
  gpuTimeOn(index: number): IGpuTime | null {
    return this._holdersRead ? gpuTime(this._holders.filter(holder => holder.gpu === index && !holder.host)) : null;
  }

  /** GPU memory held per notebook (or kernel, or process), largest first: "who holds what". */
  memoryByOwner(): IOwnerTotal[] {
    const totals = new Map<string, IOwnerTotal>();
    for (const holder of this._holders) {
      const owner = ownerLabel(holder);
      const entry = totals.get(owner) ?? {
        owner,
        kernelId: holder.kernel_id,
        bytes: 0,
        holders: [],
        cached: null,
        canFree: false,
        caps: []
      };
      entry.bytes += holder.used_memory ?? 0;
      entry.holders.push(holder);
      if (holder.cached_memory !== null && holder.cached_memory !== undefined) {
        entry.cached = (entry.cached ?? 0) + holder.cached_memory;
      }
      entry.canFree = entry.kernelId !== null && this._reporting.has(entry.kernelId);
      totals.set(owner, entry);
    }
    for (const entry of totals.values()) {
      entry.caps = ownerCaps(entry.holders);
    }
    return Array.from(totals.values()).sort((a, b) => b.bytes - a.bytes);
  }

  // -- what ended kernels left, and GPU memory held while idle ------------------------------------

  /** What kernels that have ended left on this server's GPUs, one group per GPU; [] when nothing. */
  get leftovers(): ILeftoverGroup[] {
    return this._leftovers;
  }

  setLeftovers(reply: ILeftoversReply): void {
    this._leftovers = leftoverGroups(reply);
    this._changed.emit('leftovers');
  }

  /** Kernel `kernelId`'s GPU memory on idle GPUs, where it has been idle long enough to say so; else `null`. */
  idleHold(kernelId: string | null): IIdleHold | null {
    const hold = kernelId === null ? undefined : this._idleHolds.get(kernelId);
    return hold?.line ? hold : null;
  }

  /** The running kernels whose GPUs have sat idle long enough to say so. */
  get idleHolds(): IIdleHold[] {
    return Array.from(this._idleHolds.values()).filter(hold => hold.line);
  }

  /** Emits 'clusters': the lines show on the cluster cards. */
  setIdleHolds(reply: IIdleHoldReply): void {
    this._idleHolds = new Map(reply.kernels.map(hold => [hold.kernel_id, hold]));
    this._changed.emit('clusters');
  }

  // -- connection ---------------------------------------------------------------------------------

  get connection(): IConnectionState {
    return this._connection;
  }

  setConnection(state: Partial<IConnectionState>): void {
    this._connection = { ...this._connection, ...state };
    this._changed.emit('connection');
  }

  /** Forget readings (not settings): used when the server that answers is a different one. */
  reset(): void {
    this._gpus.clear();
    this._order = [];
    this._lastTime = null;
    this._status = null;
    this._host = null;
    this._changed.emit('snapshot');
  }

  dispose(): void {
    Signal.clearData(this);
  }
}
