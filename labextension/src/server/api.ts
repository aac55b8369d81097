/** The server extension's REST endpoints and websocket URL. */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import type {
  IClustersReply,
  IEndLeftoversReply,
  IIdleHoldReply,
  ILeftoversReply,
  IProcessesReply,
  IServerConfig,
  ISnapshot
} from '../types';

const NAMESPACE = 'gpu-magics/api';

export async function requestAPI<T>(
  path: string,
  init: RequestInit = {},
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<T> {
  const url = URLExt.join(settings.baseUrl, NAMESPACE, path);
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, init, settings);
  } catch (error) {
    throw new ServerConnection.NetworkError(error as TypeError);
  }
  const text = await response.text();
  if (!response.ok) {
    throw new ServerConnection.ResponseError(response, text || undefined);
  }
  return JSON.parse(text) as T;
}

export function fetchHistory(
  limit: number,
  settings?: ServerConnection.ISettings
): Promise<{ config: IServerConfig; snapshots: ISnapshot[] }> {
  return requestAPI(`history?limit=${limit}`, {}, settings);
}

export function fetchClusters(
  settings?: ServerConnection.ISettings
): Promise<IClustersReply> {
  return requestAPI('clusters', {}, settings);
}

export function fetchProcesses(
  settings?: ServerConnection.ISettings
): Promise<IProcessesReply> {
  return requestAPI('processes', {}, settings);
}

/** Processes on this server's GPUs left by kernels that have ended. */
export function fetchLeftovers(settings?: ServerConnection.ISettings): Promise<ILeftoversReply> {
  return requestAPI('leftovers', {}, settings);
}

/** End the processes named, by the pid and start time `fetchLeftovers` listed (a reused pid is left alone). */
export function endLeftovers(
  processes: { pid: number; started: number }[],
  settings?: ServerConnection.ISettings
): Promise<IEndLeftoversReply> {
  const body = JSON.stringify({ processes: processes.map(({ pid, started }) => ({ pid, started })) });
  return requestAPI('leftovers/end', { method: 'POST', body }, settings);
}

/** What each running kernel holds on GPUs that sit idle, with a warning line once that has lasted. */
export function fetchIdleHolds(settings?: ServerConnection.ISettings): Promise<IIdleHoldReply> {
  return requestAPI('idle-hold', {}, settings);
}

/** The websocket URL; the token goes in the query only where JupyterLab would send it (cross-origin). */
export function socketUrl(settings: ServerConnection.ISettings): string {
  const url = URLExt.join(settings.wsUrl, NAMESPACE, 'ws');
  if (settings.appendToken && settings.token) {
    return `${url}?token=${encodeURIComponent(settings.token)}`;
  }
  return url;
}
