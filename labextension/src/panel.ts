/** The side panel's view: GPU cards, clusters with their buttons, and GPU memory by notebook. */
import type { Message } from '@lumino/messaging';
import { ISignal, Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';

import { chartSpanLabel, sparklinePath } from './chart';
import {
  ClusterAction,
  clusterMembers,
  clusterTitle,
  gpuShortLabel,
  memberName,
  membersByHost,
  memberWithoutGpus
} from './clusters';
import { Child, el, svg } from './dom';
import {
  formatAge,
  formatBytes,
  formatBytesPair,
  formatNumber,
  formatNumberPair,
  formatPercent,
  memoryPercent
} from './format';
import {
  GpuPanelModel,
  holderGpuLabel,
  holderRole,
  holderSourceTag,
  IGpuView,
  ModelChange
} from './model';
import type { ICluster, IClusterMember, IGpuReading, IHolder, IMemberGpu } from './types';

const CHART_W = 240;
const CHART_H = 40;

export interface IPanelActions {
  /** Run a cluster action in its kernel; resolves when the kernel has done it. */
  cluster(cluster: ICluster, request: ClusterAction): Promise<void>;
  /** Ask for a number of workers (a dialog); `null` when cancelled. */
  askWorkers(cluster: ICluster): Promise<number | null>;
  /** Confirm stopping a cluster. */
  confirmStop(cluster: ICluster): Promise<boolean>;
  /** Confirm restarting a cluster's workers (their data and state are lost). */
  confirmRestart(cluster: ICluster): Promise<boolean>;
  /** Open the notebook at `path`. */
  openPath(path: string): void;
}

export class GpuPanel extends Widget {
  private _visibilityChanged = new Signal<this, boolean>(this);
  private _retryRequested = new Signal<this, void>(this);
  private _status = el('div', { class: 'jp-GpuMagics-status' });
  private _banner = el('div', { class: 'jp-GpuMagics-banner', role: 'status' });
  private _cards = el('div', { class: 'jp-GpuMagics-cards' });
  private _clusters = el('div', { class: 'jp-GpuMagics-clusters' });
  private _holders = el('div', { class: 'jp-GpuMagics-holders' });
  private _pending = new Set<ModelChange>();
  private _frame: number | null = null;
  private _busy = new Map<string, string>(); // cluster key -> what it is doing
  private _errors = new Map<string, string>(); // cluster key -> last error

  constructor(
    readonly model: GpuPanelModel,
    private readonly _actions: IPanelActions
  ) {
    super();
    this.addClass('jp-GpuMagics-panel');
    this.node.append(
      el('div', { class: 'jp-GpuMagics-header' }, el('h2', {}, 'GPUs'), this._status),
      this._banner,
      this._cards,
      el('h3', {}, 'Clusters'),
      this._clusters,
      el('h3', {}, 'GPU memory by notebook'),
      this._holders
    );
    model.changed.connect(this._onModelChanged, this);
    for (const change of ['connection', 'snapshot', 'clusters', 'holders'] as const) {
      this._pending.add(change);
    }
    this._render();
  }

  /** `true` when the panel is shown, `false` when hidden: sample only while someone looks. */
  get visibilityChanged(): ISignal<this, boolean> {
    return this._visibilityChanged;
  }

  /** The user pressed Retry after the server refused the panel: connect again. */
  get retryRequested(): ISignal<this, void> {
    return this._retryRequested;
  }

  override dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.model.changed.disconnect(this._onModelChanged, this);
    if (this._frame !== null) {
      cancelAnimationFrame(this._frame);
    }
    super.dispose();
  }

  protected override onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this._visibilityChanged.emit(true);
  }

  protected override onAfterHide(msg: Message): void {
    super.onAfterHide(msg);
    this._visibilityChanged.emit(false);
  }

  protected override onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    this._visibilityChanged.emit(this.isVisible);
  }

  private _onModelChanged(_: GpuPanelModel, change: ModelChange): void {
    this._schedule(change);
  }

  private _schedule(change: ModelChange): void {
    this._pending.add(change);
    if (this._frame === null) {
      this._frame = requestAnimationFrame(() => {
        this._frame = null;
        this._render();
      });
    }
  }

  private _render(): void {
    const pending = this._pending;
    this._pending = new Set();
    if (pending.has('connection') || pending.has('snapshot') || pending.has('config')) {
      this._renderStatus();
    }
    if (pending.has('snapshot')) {
      this._renderCards();
    }
    if (pending.has('clusters') || pending.has('connection')) {
      this._renderClusters();
    }
    if (pending.has('holders') || pending.has('clusters')) {
      this._renderHolders();
    }
  }

  private _renderStatus(): void {
    const { connection } = this.model;
    const interval = this.model.interval;
    const source = this.model.config?.source;
    let text: string;
    switch (connection.phase) {
      case 'open':
        text = this.model.noGpu
          ? 'Connected \u00b7 no GPU to sample'
          : `Live${interval ? `, every ${interval} ms` : ''}${source === 'fake' ? ' (simulated GPUs)' : ''}`;
        break;
      case 'connecting':
        text = 'Connecting\u2026';
        break;
      case 'reconnecting': {
        const wait = connection.retryAt
          ? Math.max(0, Math.round((connection.retryAt - Date.now()) / 1000))
          : 0;
        text = `Reconnecting${wait ? ` in ${wait} s` : '\u2026'}`;
        break;
      }
      case 'forbidden':
        text = 'Refused by the server';
        break;
      default:
        text = 'Paused while hidden';
    }
    this._status.textContent = text;
    this._status.dataset.phase = connection.phase;

    const problems: string[] = [];
    const forbidden = connection.phase === 'forbidden';
    if ((connection.phase === 'reconnecting' || forbidden) && connection.error) {
      problems.push(connection.error);
    }
    const reason = this.model.unavailableReason;
    // no GPU at all is a normal state (a laptop): the cards' place says so, without an alarm
    if (reason && !forbidden && !this.model.noGpu) {
      problems.push(
        this.model.starting ? 'Reading the GPUs for the first time\u2026' : `GPUs unavailable: ${reason}`
      );
    }
    this._banner.replaceChildren(
      el('span', {}, problems.join(' ')),
      ...(forbidden
        ? [
            this._button('Retry', true, () => this._retryRequested.emit(), {
              class: 'jp-GpuMagics-button jp-GpuMagics-retry',
              title: 'Connect to the server again'
            })
          ]
        : [])
    );
    this._banner.dataset.phase = connection.phase;
    this._banner.hidden = problems.length === 0;
  }

  private _renderCards(): void {
    if (this.model.noGpu) {
      this._cards.replaceChildren(noGpuNotice(this.model.unavailableReason));
      return;
    }
    this._cards.replaceChildren(...this.model.gpus.map(view => this._card(view)));
  }

  private _card(view: IGpuView): HTMLElement {
    const r = view.reading;
    const memPct = memoryPercent(r.memory_used, r.memory_total);
    const card = el(
      'div',
      { class: 'jp-GpuMagics-card', 'data-gpu': String(r.index) },
      el(
        'div',
        { class: 'jp-GpuMagics-cardTitle' },
        el('span', { class: 'jp-GpuMagics-gpuIndex' }, cardLabel(r)),
        el('span', { class: 'jp-GpuMagics-gpuName', title: r.uuid }, r.name)
      )
    );
    if (r.error) {
      card.append(el('div', { class: 'jp-GpuMagics-error' }, r.error));
      return card;
    }
    card.append(
      el(
        'div',
        { class: 'jp-GpuMagics-metrics' },
        metric('Util', formatPercent(r.gpu_util), 'util', 'GPU utilization'),
        metric('Power', formatNumberPair(r.power, r.power_limit, 'W'), 'power', 'Power draw / limit'),
        metric('Temp', formatNumber(r.temperature, '\u00b0C'), 'temperature', 'GPU temperature'),
        metric('Clock', formatNumber(r.sm_clock, 'MHz'), 'clock', 'SM clock')
      ),
      memoryBar(r.memory_used, r.memory_total, memPct),
      chart(view)
    );
    return card;
  }

  private _renderClusters(): void {
    const clusters = this.model.clusters;
    const children: HTMLElement[] = [];
    // while the server refuses the panel, the banner says why; the lists' own errors would only repeat it
    if (this.model.clustersError && this.model.connection.phase !== 'forbidden') {
      children.push(el('div', { class: 'jp-GpuMagics-error' }, this.model.clustersError));
    }
    if (clusters.length === 0) {
      children.push(
        el(
          'div',
          { class: 'jp-GpuMagics-empty' },
          'No cluster running. Start one from a notebook with %gpucluster.'
        )
      );
    }
    const now = Date.now() / 1000;
    for (const cluster of clusters) {
      children.push(this._clusterRow(cluster, now));
    }
    this._clusters.replaceChildren(...children);
  }

  private _clusterRow(cluster: ICluster, now: number): HTMLElement {
    const key = clusterKey(cluster);
    const busy = this._busy.get(key);
    const canAct = cluster.kernel_running && cluster.kind !== 'attached' && !busy;
    const notebook = cluster.path
      ? link(cluster.path, () => this._actions.openPath(cluster.path as string))
      : el('span', {}, cluster.kernel_id ? `kernel ${cluster.kernel_id.slice(0, 8)}` : 'no kernel');
    const row = el(
      'div',
      { class: 'jp-GpuMagics-cluster', 'data-cluster': cluster.name },
      el(
        'div',
        { class: 'jp-GpuMagics-clusterTitle' },
        el('strong', {}, cluster.name),
        el('span', { class: 'jp-GpuMagics-clusterKind' }, clusterTitle(cluster))
      ),
      el(
        'div',
        { class: 'jp-GpuMagics-clusterMeta' },
        notebook,
        el('span', {}, ` \u00b7 ${cluster.scheduler_address} \u00b7 up ${formatAge(cluster.started_at, now)}`),
        ...dashboardLink(cluster)
      )
    );
    const members = clusterMembers(cluster);
    if (members.length) {
      row.append(membersView(members));
    }
    if (cluster.dashboard_note && (cluster.dashboard_link ?? cluster.dashboard_url)) {
      row.append(el('div', { class: 'jp-GpuMagics-note jp-GpuMagics-dashboardNote' }, cluster.dashboard_note));
    }
    row.append(
      el(
        'div',
        { class: 'jp-GpuMagics-buttons' },
        this._button('Stop', canAct, () => this._stop(cluster)),
        this._button('Restart', canAct, () => this._restart(cluster)),
        this._button('Scale', canAct, () => this._scale(cluster))
      )
    );
    if (busy) {
      row.append(el('div', { class: 'jp-GpuMagics-busy' }, `${busy}\u2026 (waits for the kernel if it is busy)`));
    }
    const error = this._errors.get(key);
    if (error) {
      row.append(el('div', { class: 'jp-GpuMagics-error' }, error));
    }
    if (!cluster.kernel_running) {
      row.append(
        el('div', { class: 'jp-GpuMagics-note' }, 'Its kernel is not one of this server\u2019s: manage it from there.')
      );
    }
    return row;
  }

  private _button(
    label: string,
    enabled: boolean,
    onClick: () => void,
    attrs: Record<string, string> = {}
  ): HTMLButtonElement {
    const button = el('button', { class: 'jp-GpuMagics-button', type: 'button', ...attrs }, label);
    button.disabled = !enabled;
    button.addEventListener('click', onClick);
    return button;
  }

  private async _stop(cluster: ICluster): Promise<void> {
    if (await this._actions.confirmStop(cluster)) {
      await this._act(cluster, { action: 'stop' }, 'Stopping');
    }
  }

  private async _restart(cluster: ICluster): Promise<void> {
    if (await this._actions.confirmRestart(cluster)) {
      await this._act(cluster, { action: 'restart' }, 'Restarting');
    }
  }

  private async _scale(cluster: ICluster): Promise<void> {
    const workers = await this._actions.askWorkers(cluster);
    if (workers !== null) {
      await this._act(cluster, { action: 'scale', workers }, `Scaling to ${workers}`);
    }
  }

  private async _act(cluster: ICluster, request: ClusterAction, doing: string): Promise<void> {
    const key = clusterKey(cluster);
    this._busy.set(key, doing);
    this._errors.delete(key);
    this._schedule('clusters');
    try {
      await this._actions.cluster(cluster, request);
    } catch (error) {
      this._errors.set(key, error instanceof Error ? error.message : String(error));
    } finally {
      this._busy.delete(key);
      this._schedule('clusters');
    }
  }

  private _renderHolders(): void {
    const owners = this.model.memoryByOwner();
    const children: HTMLElement[] = [];
    if (owners.length === 0) {
      children.push(el('div', { class: 'jp-GpuMagics-empty' }, 'No process holds GPU memory.'));
    } else {
      children.push(
        ...owners.map(owner =>
          el(
            'div',
            { class: 'jp-GpuMagics-owner' },
            el(
              'div',
              { class: 'jp-GpuMagics-ownerTitle' },
              el('span', { class: 'jp-GpuMagics-ownerName', title: owner.owner }, owner.owner),
              el('span', { class: 'jp-GpuMagics-num' }, formatBytes(owner.bytes))
            ),
            ...owner.holders.map(holder => holderLine(holder, owner.holders.length > 1))
          )
        )
      );
    }
    if (this.model.unreadableGpus.length) {
      children.push(
        el(
          'div',
          { class: 'jp-GpuMagics-note' },
          `Processes on GPU ${this.model.unreadableGpus.join(', ')} cannot be read (no permission or not supported).`
        )
      );
    }
    this._holders.replaceChildren(...children);
  }
}

/** One holder in the "Where" cell: the GPU (with its host when remote), who, and where the row comes from. */
function holderLine(holder: IHolder, withBytes: boolean): HTMLElement {
  const tag = holderSourceTag(holder);
  return el(
    'div',
    { class: 'jp-GpuMagics-holder', 'data-source': holder.source ?? '' },
    el('span', {}, `${holderGpuLabel(holder)} \u00b7 ${holderRole(holder)}`),
    // one process: the notebook's total above is its figure
    el('span', { class: 'jp-GpuMagics-num' }, withBytes ? formatBytes(holder.used_memory) : ''),
    tag.text ? el('span', { class: 'jp-GpuMagics-tag', title: tag.title }, tag.text) : el('span', {})
  );
}

/** The place of the cards when the server has no GPU to sample: what to do next, not an error. */
function noGpuNotice(reason: string | null): HTMLElement {
  return el(
    'div',
    { class: 'jp-GpuMagics-noGpu' },
    el('div', { class: 'jp-GpuMagics-noGpuTitle' }, 'No GPU on this server'),
    el(
      'div',
      {},
      'The CPU backends work without one: ',
      el('code', {}, '%%gpurun cpu-threads'),
      ' runs a cell on every core, ',
      el('code', {}, '%gpucluster --cpu-workers 4'),
      ' starts a CPU cluster.'
    ),
    reason ? el('div', { class: 'jp-GpuMagics-note' }, reason) : null
  );
}

/** " · dashboard ↗": the Dask dashboard, through the link made for this browser where the server has one. */
function dashboardLink(cluster: ICluster): Child[] {
  const href = cluster.dashboard_link ?? cluster.dashboard_url;
  if (!href) {
    return [];
  }
  return [
    ' \u00b7 ',
    el(
      'a',
      {
        class: 'jp-GpuMagics-link jp-GpuMagics-dashboard',
        href,
        target: '_blank',
        rel: 'noopener noreferrer',
        title: cluster.dashboard_note ?? `The Dask dashboard: ${href}`
      },
      'dashboard \u2197'
    )
  ];
}

/** The cluster's workers with their GPUs, live: a heading per host, a line per GPU. */
function membersView(members: IClusterMember[]): HTMLElement {
  const view = el('div', { class: 'jp-GpuMagics-members' });
  for (const group of membersByHost(members)) {
    view.append(
      el('div', { class: 'jp-GpuMagics-host', 'data-host': group.host, title: `host ${group.host}` }, group.host),
      // one worker on a host: its GPUs need no worker name (it is in each line's tooltip)
      ...group.members.flatMap(member =>
        memberLines(member, group.members.filter(m => m.role !== 'kernel').length > 1 || member.role === 'kernel')
      )
    );
  }
  return view;
}

function memberLines(member: IClusterMember, named: boolean): HTMLElement[] {
  const name = memberName(member);
  if (member.gpus.length === 0) {
    return [
      el(
        'div',
        { class: 'jp-GpuMagics-memberGpu jp-GpuMagics-memberIdle', 'data-member': member.name, title: member.address },
        el('span', { class: 'jp-GpuMagics-memberName' }, name),
        el('span', { class: 'jp-GpuMagics-memberWait' }, memberWithoutGpus(member))
      )
    ];
  }
  return member.gpus.map(gpu => memberGpuLine(member, named ? name : null, gpu));
}

function memberGpuLine(member: IClusterMember, name: string | null, gpu: IMemberGpu): HTMLElement {
  const title = [
    `${gpu.label} \u00b7 ${gpu.name}`,
    `${member.role === 'kernel' ? 'the kernel' : `worker ${member.name}`} (${member.address})`,
    gpu.process_memory !== null
      ? `it holds ${formatBytes(gpu.process_memory)}${gpu.process_memory_source ? ` (${gpu.process_memory_source})` : ''}`
      : ''
  ]
    .filter(Boolean)
    .join('\n');
  const line = el(
    'div',
    { class: 'jp-GpuMagics-memberGpu', 'data-member': member.name, 'data-gpu-label': gpu.label, title },
    el('span', { class: 'jp-GpuMagics-memberName' }, name ? `${gpuShortLabel(gpu)} \u00b7 ${name}` : gpuShortLabel(gpu))
  );
  if (gpu.error) {
    line.append(el('span', { class: 'jp-GpuMagics-unreadable', title: gpu.error }, 'unreadable'));
    return line;
  }
  line.append(
    miniBar(gpu.gpu_util, 'utilization'),
    el('span', { class: 'jp-GpuMagics-value', title: 'utilization' }, formatPercent(gpu.gpu_util)),
    el('span', { class: 'jp-GpuMagics-value', title: 'memory used / total' }, formatBytesPair(gpu.memory_used, gpu.memory_total))
  );
  return line;
}

function miniBar(percent: number | null, what: string): HTMLElement {
  const fill = el('div', { class: 'jp-GpuMagics-barFill' });
  fill.style.width = `${Math.min(100, Math.max(0, percent ?? 0)).toFixed(1)}%`;
  return el('div', { class: 'jp-GpuMagics-bar jp-GpuMagics-miniBar', title: `${what}, 0\u2013100%` }, fill);
}

function clusterKey(cluster: ICluster): string {
  return `${cluster.pid}/${cluster.name}`;
}

/** "GPU 0", or "127.0.0.2 \u00b7 GPU 1" for a GPU read on another host. */
function cardLabel(reading: IGpuReading): string {
  return reading.host ? `${reading.host} \u00b7 GPU ${reading.nvml_index ?? reading.index}` : `GPU ${reading.index}`;
}

function metric(label: string, value: string, name: string, title: string): HTMLElement {
  return el(
    'div',
    { class: 'jp-GpuMagics-metric', 'data-metric': name, title },
    el('span', { class: 'jp-GpuMagics-label' }, label),
    el('span', { class: 'jp-GpuMagics-value' }, value)
  );
}

/** Memory: used / total, and a bar of the share in use (0 to the total). */
function memoryBar(used: number | null, total: number | null, percent: number | null): HTMLElement {
  const fill = el('div', { class: 'jp-GpuMagics-barFill' });
  fill.style.width = `${Math.min(100, Math.max(0, percent ?? 0)).toFixed(1)}%`;
  return el(
    'div',
    {
      class: 'jp-GpuMagics-memoryBar',
      'data-metric': 'memory',
      title: `GPU memory in use: ${formatPercent(percent)} of ${formatBytes(total)}`
    },
    el('span', { class: 'jp-GpuMagics-label' }, 'Memory'),
    el('div', { class: 'jp-GpuMagics-bar' }, fill),
    el('span', { class: 'jp-GpuMagics-value' }, formatBytesPair(used, total))
  );
}

/** Utilization and memory (both 0-100%) over the samples kept, with a scale, a legend and the time span. */
function chart(view: IGpuView): HTMLElement {
  const mid = (CHART_H / 2).toFixed(1);
  const plot = svg(
    'svg',
    {
      class: 'jp-GpuMagics-chart',
      viewBox: `0 0 ${CHART_W} ${CHART_H}`,
      preserveAspectRatio: 'none',
      role: 'img',
      'aria-label': 'utilization and memory in use over time, 0 to 100%'
    },
    svg('path', { class: 'jp-GpuMagics-grid', d: `M0,${mid} L${CHART_W},${mid}` }),
    svg('path', { class: 'jp-GpuMagics-lineMemory', d: sparklinePath(view.memory.values(), CHART_W, CHART_H) }),
    svg('path', { class: 'jp-GpuMagics-lineUtil', d: sparklinePath(view.util.values(), CHART_W, CHART_H) })
  );
  return el(
    'div',
    { class: 'jp-GpuMagics-chartBox' },
    el(
      'div',
      { class: 'jp-GpuMagics-plot' },
      plot,
      el('span', { class: 'jp-GpuMagics-axis jp-GpuMagics-axisTop' }, '100%'),
      el('span', { class: 'jp-GpuMagics-axis jp-GpuMagics-axisBottom' }, '0%')
    ),
    el(
      'div',
      { class: 'jp-GpuMagics-legend' },
      el('span', { class: 'jp-GpuMagics-key jp-GpuMagics-keyUtil' }, 'util'),
      el('span', { class: 'jp-GpuMagics-key jp-GpuMagics-keyMemory' }, 'memory'),
      el('span', { class: 'jp-GpuMagics-span' }, chartSpanLabel(view.times.values()))
    )
  );
}

function link(text: string, onClick: () => void): HTMLElement {
  const a = el('a', { class: 'jp-GpuMagics-link', href: '#' }, text);
  a.addEventListener('click', event => {
    event.preventDefault();
    onClick();
  });
  return a;
}
