/**
 * The status-bar item: the GPUs of the notebook in front (those its kernel holds memory on, else all of the
 * server's), their utilization and memory in one short line; a click opens the side panel. While the panel samples,
 * the item follows its feed (every second, the cards' figures); else it polls the REST API every few seconds and
 * stands by while the page is hidden.
 */
import { ServerConnection } from '@jupyterlab/services';
import { Poll } from '@lumino/polling';
import { Widget } from '@lumino/widgets';

import { fetchClusters, requestAPI } from '../server/api';
import { gpuStatus, idleHoldStatus, kernelGpus, newerSnapshot, parkedStatus } from './text';
import type { ICluster, IIdleHoldReply, IProcessesReply, IServerConfig, ISnapshot } from '../types';

export const STATUS_POLL_MS = 5000;

export class GpuStatusItem extends Widget {
  private readonly _poll: Poll;
  private _snapshot: ISnapshot | null = null;
  private _processes: IProcessesReply | null = null;
  private _idleHolds: IIdleHoldReply | null = null;
  private _clusters: ICluster[] | null = null;

  /** `kernelId`: the kernel of the notebook (or console) in front; `open`: show the side panel. */
  constructor(
    private readonly _kernelId: () => string | null,
    open: () => void,
    private readonly _settings: ServerConnection.ISettings = ServerConnection.makeSettings()
  ) {
    super({ node: document.createElement('button') });
    this.addClass('jp-GpuMagics-statusItem');
    this.node.setAttribute('type', 'button');
    this.node.addEventListener('click', open);
    this.node.textContent = 'GPU';
    this._poll = new Poll({
      factory: () => this._refresh(),
      frequency: { interval: STATUS_POLL_MS, backoff: true, max: 60_000 },
      name: 'gpu-magics:status',
      standby: 'when-hidden'
    });
  }

  /** A snapshot from the side panel's feed (every second while it samples): the item says the same as the cards. */
  take(snapshot: ISnapshot): void {
    const shown = newerSnapshot(this._snapshot, snapshot);
    if (shown !== this._snapshot) {
      this._snapshot = shown;
      this.render();
    }
  }

  /** Render again now (a reply came, or the notebook in front changed). */
  render(): void {
    const kernelId = this._kernelId();
    const status = gpuStatus(this._snapshot?.gpus ?? [], kernelGpus(this._processes, kernelId));
    const idle = idleHoldStatus(this._idleHolds, kernelId);
    const parked = parkedStatus(this._clusters, kernelId, Date.now() / 1000);
    const suffixes = [
      suffixOf('jp-GpuMagics-parkedHeld', parked.suffix),
      suffixOf('jp-GpuMagics-idleHeld', idle.suffix)
    ].filter((node): node is HTMLSpanElement => node !== null);
    this.node.replaceChildren(status.text, ...suffixes);
    const title = [status.title];
    if (parked.line) {
      title.push(parked.line);
    }
    if (idle.lines.length) {
      title.push(`GPU memory held on idle GPUs:\n${idle.lines.join('\n')}`);
    }
    this.node.title = title.join('\n\n');
  }

  override dispose(): void {
    this._poll.dispose();
    super.dispose();
  }

  private async _refresh(): Promise<void> {
    // `devices` reads the GPUs now (the buffered history stands still while no panel watches)
    const [devices, processes, idleHolds, clusters] = await Promise.all([
      requestAPI<{ config: IServerConfig; snapshot: ISnapshot }>('devices', {}, this._settings),
      requestAPI<IProcessesReply>('processes', {}, this._settings).catch(() => null),
      requestAPI<IIdleHoldReply>('idle-hold', {}, this._settings).catch(() => null),
      fetchClusters(this._settings).catch(() => null)
    ]);
    this._snapshot = newerSnapshot(this._snapshot, devices.snapshot);
    this._processes = processes;
    this._idleHolds = idleHolds;
    this._clusters = clusters?.clusters ?? null;
    this.render();
  }
}

/** A suffix of the item's line in its own span (its colour), or null where there is none. */
function suffixOf(className: string, text: string): HTMLSpanElement | null {
  if (!text) {
    return null;
  }
  const span = document.createElement('span');
  span.className = className;
  span.textContent = text;
  return span;
}
