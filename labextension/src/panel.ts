/**
 * The side panel: a status line and banner, the GPU cards, the clusters with their members and buttons, and GPU
 * memory by notebook, each a view of its own (`views/sections/`); this widget composes them and renders what the model
 * says changed, at most once per frame.
 */
import type { Message } from '@lumino/messaging';
import { ISignal, Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';

import { el } from './views/dom';
import { GpuPanelModel, ModelChange } from './model/panelModel';
import { ClustersView, IClusterActions } from './views/sections/clusters';
import { GpuCardsView } from './views/sections/gpuCards';
import { ILeftoverActions, LeftoversView } from './views/sections/leftovers';
import { IMemoryActions, MemoryView } from './views/sections/memory';
import { StatusView } from './views/sections/status';

/** What the panel's buttons and links do (injected: the panel runs no kernel code and opens nothing itself). */
export type IPanelActions = IClusterActions & IMemoryActions & ILeftoverActions;

export class GpuPanel extends Widget {
  private _visibilityChanged = new Signal<this, boolean>(this);
  private _retryRequested = new Signal<this, void>(this);
  private _status = new StatusView(() => this._retryRequested.emit());
  private _cards = new GpuCardsView();
  private _clusters: ClustersView;
  private _memory: MemoryView;
  private _leftovers: LeftoversView;
  private _pending = new Set<ModelChange>();
  private _frame: number | null = null;

  constructor(
    readonly model: GpuPanelModel,
    actions: IPanelActions
  ) {
    super();
    this._clusters = new ClustersView(actions, () => this._schedule('clusters'));
    this._memory = new MemoryView(actions, () => this._schedule('holders'));
    this._leftovers = new LeftoversView(actions, () => this._schedule('leftovers'));
    this.addClass('jp-GpuMagics-panel');
    this.node.append(
      el('div', { class: 'jp-GpuMagics-header' }, el('h2', {}, 'GPUs'), this._status.status),
      this._status.banner,
      this._cards.node,
      el('h3', {}, 'Clusters'),
      this._clusters.node,
      this._leftovers.node,
      el('h3', {}, 'GPU memory by notebook'),
      this._memory.node
    );
    model.changed.connect(this._onModelChanged, this);
    for (const change of ['connection', 'snapshot', 'clusters', 'holders', 'leftovers'] as const) {
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

  /** Each view renders again only when what it shows changed. */
  private _render(): void {
    const pending = this._pending;
    this._pending = new Set();
    if (pending.has('connection') || pending.has('snapshot') || pending.has('config')) {
      this._status.render(this.model);
    }
    if (pending.has('snapshot') || pending.has('holders') || pending.has('config')) {
      this._cards.render(this.model); // holders: which GPUs others use
    }
    if (pending.has('clusters') || pending.has('connection') || pending.has('config')) {
      this._clusters.render(this.model);
    }
    if (pending.has('holders') || pending.has('clusters')) {
      this._memory.render(this.model);
    }
    if (pending.has('leftovers') || pending.has('clusters')) {
      this._leftovers.render(this.model);
    }
  }
}
