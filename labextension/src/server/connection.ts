/**
 * Keeps the model fed: a websocket for samples (reconnecting with backoff after a server restart), and
 * polls of the clusters and the GPU memory holders while the panel is shown.
 *
 * A socket that closes before it opens may be a refusal (403: the session expired, or the user may not read
 * the panel's resource): the browser hides the status, so a REST request to `devices` asks. A 401 or 403 there
 * stops the reconnecting until `retry()` (the panel's Retry button): retrying a refusal never ends.
 */
import { ServerConnection } from '@jupyterlab/services';
import { Poll } from '@lumino/polling';

import {
  fetchClusters,
  fetchIdleHolds,
  fetchLeftovers,
  fetchHistory,
  fetchProcesses,
  requestAPI,
  socketUrl
} from './api';
import { Backoff } from './backoff';
import { forbiddenMessage, GpuPanelModel } from '../model/panelModel';
import type { ServerMessage } from '../types';

const POLL_MS = 2000;

/** The HTTP status of a failed request (`ServerConnection.ResponseError`), or `null` for any other error. */
export function errorStatus(error: unknown): number | null {
  if (typeof error !== 'object' || error === null || !('response' in error)) {
    return null;
  }
  const response = (error as { response: unknown }).response;
  if (typeof response !== 'object' || response === null || !('status' in response)) {
    return null;
  }
  const status = (response as { status: unknown }).status;
  return typeof status === 'number' ? status : null;
}

/** Whether an HTTP status means the server refused this user (not a server that is down or restarting). */
export function isAuthFailure(status: number | null): status is 401 | 403 {
  return status === 401 || status === 403;
}

export class MonitorConnection {
  private _socket: WebSocket | null = null;
  private _retryTimer: number | null = null;
  private _running = false;
  private _interval: number;
  private _backoff = new Backoff();
  /** Counts starts and stops, so that a probe that answers late is ignored. */
  private _generation = 0;
  /** Clusters and holders: now on start, then `POLL_MS` after each reply; stopped while the panel is hidden. */
  private readonly _lists = new Poll({
    auto: false,
    factory: () => this._refreshLists(),
    frequency: { interval: POLL_MS, backoff: false },
    name: 'gpu-magics:lists',
    standby: 'never'
  });

  constructor(
    private readonly _model: GpuPanelModel,
    options: { interval?: number; settings?: ServerConnection.ISettings } = {}
  ) {
    this._interval = options.interval ?? 1000;
    this._settings = options.settings ?? ServerConnection.makeSettings();
  }

  private readonly _settings: ServerConnection.ISettings;

  get running(): boolean {
    return this._running;
  }

  start(): void {
    if (this._running) {
      return;
    }
    this._running = true;
    this._generation += 1;
    this._connect();
    void this._lists.start();
  }

  stop(): void {
    this._halt();
    this._model.setConnection({ phase: 'idle', retryAt: null });
  }

  /** Connect again now, with a fresh backoff (the Retry button after a refusal, or a socket waiting to retry). */
  retry(): void {
    this._halt();
    this._backoff.reset();
    this.start();
  }

  private _halt(): void {
    this._running = false;
    this._quiesce();
  }

  /** Close the socket, cancel a pending retry and the list polling; later answers are ignored. */
  private _quiesce(): void {
    this._generation += 1;
    this._clearRetry();
    void this._lists.stop();
    const socket = this._socket;
    this._socket = null;
    socket?.close();
  }

  /** Ask the server for samples every `ms` milliseconds (it clamps to at least 100). */
  setInterval(ms: number): void {
    this._interval = ms;
    this._send({ type: 'configure', interval: ms });
  }

  /** Poll clusters and holders now (after a Stop or Scale). */
  refresh(): Promise<void> {
    return this._refreshLists();
  }

  dispose(): void {
    this.stop();
    this._lists.dispose();
  }

  private _connect(): void {
    if (!this._running) {
      return;
    }
    this._model.setConnection({
      phase: this._backoff.attempt === 0 ? 'connecting' : 'reconnecting',
      retryAt: null
    });
    let socket: WebSocket;
    try {
      socket = new this._settings.WebSocket(socketUrl(this._settings));
    } catch (error) {
      this._scheduleRetry(String(error));
      return;
    }
    this._socket = socket;
    let opened = false;
    socket.onopen = () => {
      opened = true;
      this._backoff.reset();
      this._model.setConnection({
        phase: 'open',
        attempt: 0,
        retryAt: null,
        error: null
      });
      this._send({ type: 'configure', interval: this._interval });
      void this._loadHistory();
    };
    socket.onmessage = event => this._onMessage(event.data);
    socket.onclose = event => {
      if (this._socket !== socket) {
        return; // stopped, or replaced
      }
      this._socket = null;
      const why = opened
        ? 'The connection to the server was lost.'
        : `Could not connect to the server${event.code ? ` (code ${event.code})` : ''}.`;
      this._scheduleRetry(why);
      if (!opened) {
        void this._probe(); // refused (403) or down? the browser does not tell a websocket's status
      }
    };
  }

  /** Ask the REST API whether the server refuses this user; if it does, stop retrying. */
  private async _probe(): Promise<void> {
    const generation = this._generation;
    let status: number | null;
    try {
      await requestAPI('devices', {}, this._settings);
      return; // the server answers: the socket failed for another reason, keep retrying
    } catch (error) {
      status = errorStatus(error);
    }
    if (generation !== this._generation || !this._running || !isAuthFailure(status)) {
      return;
    }
    this._refused(status);
  }

  private _refused(status: number): void {
    this._quiesce(); // still running: the panel stays refused until Retry
    this._model.setConnection({
      phase: 'forbidden',
      retryAt: null,
      error: forbiddenMessage(status)
    });
  }

  private _scheduleRetry(error: string): void {
    if (!this._running) {
      return;
    }
    const delay = this._backoff.next();
    this._model.setConnection({
      phase: 'reconnecting',
      attempt: this._backoff.attempt,
      retryAt: Date.now() + delay,
      error
    });
    this._retryTimer = window.setTimeout(() => {
      this._retryTimer = null;
      this._connect();
    }, delay);
  }

  private _onMessage(data: unknown): void {
    if (typeof data !== 'string') {
      return;
    }
    let message: ServerMessage;
    try {
      message = JSON.parse(data) as ServerMessage;
    } catch {
      return;
    }
    switch (message.type) {
      case 'hello':
        this._model.setConfig(message.config, message.interval);
        this._model.applySnapshot(message.snapshot);
        break;
      case 'snapshot':
        this._model.applySnapshot(message.snapshot);
        break;
      case 'configured':
        this._model.setInterval(message.interval);
        break;
      case 'error':
        console.warn('gpu-magics: the server refused a message:', message.message);
        break;
      default:
        break;
    }
  }

  private async _loadHistory(): Promise<void> {
    try {
      const reply = await fetchHistory(this._model.maxPoints, this._settings);
      this._model.applyHistory(reply.snapshots);
    } catch {
      // The live feed fills the charts anyway.
    }
  }

  private async _refreshLists(): Promise<void> {
    const [clusters, processes, leftovers, idleHolds] = await Promise.allSettled([
      fetchClusters(this._settings),
      fetchProcesses(this._settings),
      fetchLeftovers(this._settings),
      fetchIdleHolds(this._settings)
    ]);
    if (clusters.status === 'fulfilled') {
      this._model.setClusters(clusters.value.clusters, null, clusters.value.elsewhere ?? []);
    } else {
      this._model.setClusters(this._model.clusters, String(clusters.reason));
    }
    if (processes.status === 'fulfilled') {
      this._model.setHolders(processes.value);
    }
    if (leftovers.status === 'fulfilled') {
      this._model.setLeftovers(leftovers.value);
    }
    if (idleHolds.status === 'fulfilled') {
      this._model.setIdleHolds(idleHolds.value);
    }
  }

  private _send(message: object): void {
    if (this._socket?.readyState === WebSocket.OPEN) {
      this._socket.send(JSON.stringify(message));
    }
  }

  private _clearRetry(): void {
    if (this._retryTimer !== null) {
      window.clearTimeout(this._retryTimer);
      this._retryTimer = null;
    }
  }
}
