/**
 * The status-bar item: the GPUs of the notebook in front (those its kernel holds memory on, else all of the
 * server's), their utilization and memory in one short line; a click opens the side panel. While the panel samples,
 * the item follows its feed (every second, the cards' figures); else it polls the REST API every few seconds and
 * stands by while the page is hidden.
 */
import { ServerConnection } from '@jupyterlab/services';
import { Poll } from '@lumino/polling';
import { Widget } from '@lumino/widgets';

import { requestAPI } from '../server/api';
import { gpuStatus, idleHoldStatus, kernelGpus, newerSnapshot } from './text';
import type { IIdleHoldReply, IProcessesReply, IServerConfig, ISnapshot } from '../types';

export const STATUS_POLL_MS = 5000;

export class GpuStatusItem extends Widget {
  private readonly _poll: Poll;
  private _snapshot: ISnapshot | null = null;
  private _processes: IProcessesReply | null = null;
  private _idleHolds: IIdleHoldReply | null = null;

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
    const suffix = document.createElement('span');
    suffix.className = 'jp-GpuMagics-idleHeld';
    suffix.textContent = idle.suffix;
    this.node.replaceChildren(status.text, ...(idle.suffix ? [suffix] : []));
    this.node.title = idle.lines.length
      ? `${status.title}\n\nGPU memory held on idle GPUs:\n${idle.lines.join('\n')}`
      : status.title;
  }

  override dispose(): void {
    this._poll.dispose();
    super.dispose();
  }

  private async _refresh(): Promise<void> {
    // `devices` reads the GPUs now (the buffered history stands still while no panel watches)
    const [devices, processes, idleHolds] = await Promise.all([
      requestAPI<{ config: IServerConfig; snapshot: ISnapshot }>('devices', {}, this._settings),
      requestAPI<IProcessesReply>('processes', {}, this._settings).catch(() => null),
      requestAPI<IIdleHoldReply>('idle-hold', {}, this._settings).catch(() => null)
    ]);
    this._snapshot = newerSnapshot(this._snapshot, devices.snapshot);
    this._processes = processes;
    this._idleHolds = idleHolds;
    this.render();
  }
}
