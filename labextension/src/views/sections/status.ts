/** The panel's status line (live, connecting, reconnecting...) and the banner that says what is wrong, if anything. */
import { el } from '../dom';
import type { IConnectionState } from '../../model/panelModel';
import type { IServerConfig } from '../../types';
import { button } from '../controls';

/** What the status line and banner show (the panel's model has it). */
export interface IStatusState {
  readonly connection: IConnectionState;
  readonly interval: number | null;
  readonly config: IServerConfig | null;
  readonly noGpu: boolean;
  readonly starting: boolean;
  readonly unavailableReason: string | null;
}

/** The status line's text; `now` in ms since the epoch (for the seconds until a reconnect). */
export function statusText(state: IStatusState, now: number = Date.now()): string {
  const { connection, interval } = state;
  switch (connection.phase) {
    case 'open':
      return state.noGpu
        ? 'Connected \u00b7 no GPU to sample'
        : `Live${interval ? `, every ${interval} ms` : ''}${state.config?.source === 'fake' ? ' (simulated GPUs)' : ''}`;
    case 'connecting':
      return 'Connecting\u2026';
    case 'reconnecting': {
      const wait = connection.retryAt ? Math.max(0, Math.round((connection.retryAt - now) / 1000)) : 0;
      return `Reconnecting${wait ? ` in ${wait} s` : '\u2026'}`;
    }
    case 'forbidden':
      return 'Refused by the server';
    default:
      return 'Paused while hidden';
  }
}

/** What the banner says: the connection's error and why there are no GPU readings; [] when all is well. */
export function statusProblems(state: IStatusState): string[] {
  const { connection } = state;
  const problems: string[] = [];
  const forbidden = connection.phase === 'forbidden';
  if ((connection.phase === 'reconnecting' || forbidden) && connection.error) {
    problems.push(connection.error);
  }
  const reason = state.unavailableReason;
  // no GPU at all is a normal state (a laptop): the cards' place says so, without an alarm
  if (reason && !forbidden && !state.noGpu) {
    problems.push(
      state.starting
        ? 'Reading the GPUs for the first time\u2026'
        : reason.startsWith('stale: ') // the server's last reading before its sampler paused, a new one late
          ? `GPU figures ${reason.slice('stale: '.length)}.`
          : `GPUs unavailable: ${reason}`
    );
  }
  return problems;
}

export class StatusView {
  /** The status line, beside the panel's title. */
  readonly status = el('div', { class: 'jp-GpuMagics-status' });
  /** The banner under the title, hidden when there is nothing to say; with Retry after the server refused. */
  readonly banner = el('div', { class: 'jp-GpuMagics-banner', role: 'status' });

  /** `retry` is called when the user presses Retry. */
  constructor(private readonly _retry: () => void) {}

  render(state: IStatusState, now: number = Date.now()): void {
    const phase = state.connection.phase;
    this.status.textContent = statusText(state, now);
    this.status.dataset.phase = phase;
    const problems = statusProblems(state);
    this.banner.replaceChildren(
      el('span', {}, problems.join(' ')),
      ...(phase === 'forbidden'
        ? [
            button('Retry', true, () => this._retry(), {
              class: 'jp-GpuMagics-button jp-GpuMagics-retry',
              title: 'Connect to the server again'
            })
          ]
        : [])
    );
    this.banner.dataset.phase = phase;
    this.banner.hidden = problems.length === 0;
  }
}
