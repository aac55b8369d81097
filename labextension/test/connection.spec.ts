import { errorStatus, MonitorConnection } from '../src/server/connection';
import { forbiddenMessage, GpuPanelModel } from '../src/model/panelModel';
import { reading, snapshot } from './fixtures';

jest.mock('@jupyterlab/services', () => ({
  ServerConnection: { makeSettings: () => ({}) }
}));

jest.mock('../src/server/api', () => ({
  fetchClusters: jest.fn(async () => ({ clusters: [] })),
  fetchHistory: jest.fn(async () => ({ snapshots: [] })),
  fetchProcesses: jest.fn(async () => ({
    time: null,
    status: null,
    processes: [],
    unreadable_gpus: [],
    others: [],
    reporting_kernels: []
  })),
  fetchLeftovers: jest.fn(async () => ({
    time: 1,
    leftovers: [{ pid: 7, started: 1.5, name: 'python', kernel_id: 'k', gpu: 0, gpu_uuid: 'GPU-0', gpu_label: 'GPU 0', used_memory: 1024 }],
    summary: ['left by a kernel that has ended: 1 process holds 1.0 KiB on GPU 0']
  })),
  fetchIdleHolds: jest.fn(async () => ({
    time: 1,
    warning_min: 30,
    kernels: [{ kernel_id: 'k2', path: 'a.ipynb', held: 1, cached: 0, gpus: ['GPU 0'], cluster: null, idle_s: 2000, line: 'holds 1 B on GPU 0, idle for 33 min' }]
  })),
  requestAPI: jest.fn(async () => ({})),
  socketUrl: () => 'ws://localhost/gpu-magics/api/ws'
}));

const api = jest.requireMock('../src/server/api') as {
  fetchClusters: jest.Mock;
  fetchProcesses: jest.Mock;
  fetchLeftovers: jest.Mock;
  fetchIdleHolds: jest.Mock;
  requestAPI: jest.Mock;
};

/** What `requestAPI` throws for an HTTP error: a `ServerConnection.ResponseError` carries the response. */
function responseError(status: number): Error {
  return Object.assign(new Error(`HTTP ${status}`), { response: { status } });
}

/** Stands in for the browser's WebSocket: records what is sent, lets the test open, message and close it. */
class FakeSocket {
  static readonly CONNECTING = 0;
  static readonly OPEN = 1;
  static readonly CLOSED = 3;
  static all: FakeSocket[] = [];

  readyState = FakeSocket.CONNECTING;
  sent: unknown[] = [];
  onopen: (() => void) | null = null;
  onmessage: ((event: { data: unknown }) => void) | null = null;
  onclose: ((event: { code: number }) => void) | null = null;

  constructor(readonly url: string) {
    FakeSocket.all.push(this);
  }

  send(data: string): void {
    this.sent.push(JSON.parse(data));
  }

  close(): void {
    this.readyState = FakeSocket.CLOSED;
  }

  open(): void {
    this.readyState = FakeSocket.OPEN;
    this.onopen?.();
  }

  message(data: object): void {
    this.onmessage?.({ data: JSON.stringify(data) });
  }

  drop(code = 1006): void {
    this.readyState = FakeSocket.CLOSED;
    this.onclose?.({ code });
  }
}

const globals = globalThis as unknown as Record<string, unknown>;

function connect(model: GpuPanelModel): MonitorConnection {
  const settings = { WebSocket: FakeSocket } as never;
  return new MonitorConnection(model, { interval: 500, settings });
}

function lastSocket(): FakeSocket {
  const socket = FakeSocket.all[FakeSocket.all.length - 1];
  if (socket === undefined) {
    throw new Error('no socket was opened');
  }
  return socket;
}

describe('MonitorConnection', () => {
  beforeEach(() => {
    globals['window'] = globalThis;
    globals['WebSocket'] = FakeSocket;
    FakeSocket.all = [];
    jest.useFakeTimers();
    jest.spyOn(Math, 'random').mockReturnValue(1);
    api.fetchClusters.mockClear();
    api.fetchProcesses.mockClear();
    api.requestAPI.mockReset();
    api.requestAPI.mockImplementation(async () => ({}));
  });

  afterEach(() => {
    jest.useRealTimers();
    jest.restoreAllMocks();
    delete globals['window'];
    delete globals['WebSocket'];
  });

  it('polls clusters and holders at once, then every 2 s, and not after stop', async () => {
    const model = new GpuPanelModel();
    const connection = connect(model);
    connection.start();
    await jest.advanceTimersByTimeAsync(0);
    expect(api.fetchClusters).toHaveBeenCalledTimes(1);
    expect(api.fetchProcesses).toHaveBeenCalledTimes(1);
    await jest.advanceTimersByTimeAsync(2000);
    expect(api.fetchClusters).toHaveBeenCalledTimes(2);
    connection.stop();
    await jest.advanceTimersByTimeAsync(10000);
    expect(api.fetchClusters).toHaveBeenCalledTimes(2);
    expect(model.connection.phase).toBe('idle');
    expect(lastSocket().readyState).toBe(FakeSocket.CLOSED);
    connection.start(); // shown again: polls at once again
    await jest.advanceTimersByTimeAsync(0);
    expect(api.fetchClusters).toHaveBeenCalledTimes(3);
    connection.dispose();
  });

  it('polls what ended kernels left and the idle holds with the clusters, into the model', async () => {
    const model = new GpuPanelModel();
    const connection = connect(model);
    const leftoversBefore = api.fetchLeftovers.mock.calls.length;
    const idleBefore = api.fetchIdleHolds.mock.calls.length;
    connection.start();
    await jest.advanceTimersByTimeAsync(0);
    expect(api.fetchLeftovers).toHaveBeenCalledTimes(leftoversBefore + 1);
    expect(api.fetchIdleHolds).toHaveBeenCalledTimes(idleBefore + 1);
    expect(model.leftovers.map(group => group.processes.map(p => p.pid))).toEqual([[7]]);
    expect(model.idleHold('k2')?.line).toBe('holds 1 B on GPU 0, idle for 33 min');
    await jest.advanceTimersByTimeAsync(2000);
    expect(api.fetchLeftovers).toHaveBeenCalledTimes(leftoversBefore + 2);
    expect(api.fetchIdleHolds).toHaveBeenCalledTimes(idleBefore + 2);
    connection.dispose();
  });

  it('configures the socket on open and feeds the model', async () => {
    const model = new GpuPanelModel();
    const connection = connect(model);
    const changes: string[] = [];
    model.changed.connect((_, change) => changes.push(change));
    connection.start();
    expect(model.connection.phase).toBe('connecting');
    const socket = lastSocket();
    socket.open();
    expect(model.connection).toEqual({ phase: 'open', attempt: 0, retryAt: null, error: null });
    expect(socket.sent).toEqual([{ type: 'configure', interval: 500 }]);
    socket.message({
      type: 'hello',
      config: {
        interval: 1000,
        slow_interval: 2000,
        history: 600,
        source: 'fake',
        cpu_cluster: '%gpucluster --cpu-workers 2',
        gpu_packages: false
      },
      interval: 500,
      snapshot: snapshot(1, [reading(0)])
    });
    expect(model.interval).toBe(500);
    expect(model.gpus).toHaveLength(1);
    connection.setInterval(250);
    expect(socket.sent[1]).toEqual({ type: 'configure', interval: 250 });
    expect(changes).toContain('snapshot');
    connection.dispose();
  });

  it('reconnects with backoff after the socket drops, and resets on success', async () => {
    const model = new GpuPanelModel();
    const connection = connect(model);
    connection.start();
    lastSocket().drop();
    expect(model.connection.phase).toBe('reconnecting');
    expect(model.connection.attempt).toBe(1);
    expect(model.connection.retryAt).toBe(Date.now() + 1000);
    expect(model.connection.error).toBe('Could not connect to the server (code 1006).');
    await jest.advanceTimersByTimeAsync(999);
    expect(FakeSocket.all).toHaveLength(1);
    await jest.advanceTimersByTimeAsync(1);
    expect(FakeSocket.all).toHaveLength(2);
    lastSocket().drop();
    expect(model.connection.retryAt).toBe(Date.now() + 2000);
    await jest.advanceTimersByTimeAsync(2000);
    lastSocket().open();
    expect(model.connection.attempt).toBe(0);
    lastSocket().drop();
    expect(model.connection.error).toBe('The connection to the server was lost.');
    expect(model.connection.retryAt).toBe(Date.now() + 1000);
    connection.stop();
    await jest.advanceTimersByTimeAsync(5000);
    expect(FakeSocket.all).toHaveLength(3);
    connection.dispose();
  });

  it('probes the REST API when a socket closes before opening, and keeps retrying a server that answers', async () => {
    const model = new GpuPanelModel();
    const connection = connect(model);
    connection.start();
    lastSocket().drop();
    await jest.advanceTimersByTimeAsync(0);
    expect(api.requestAPI).toHaveBeenCalledWith('devices', {}, expect.anything());
    expect(model.connection.phase).toBe('reconnecting');
    await jest.advanceTimersByTimeAsync(1000);
    expect(FakeSocket.all).toHaveLength(2);
    connection.dispose();
  });

  it('keeps retrying when the probe fails for another reason (server down, 502)', async () => {
    const model = new GpuPanelModel();
    const connection = connect(model);
    api.requestAPI.mockRejectedValue(responseError(502));
    connection.start();
    lastSocket().drop();
    await jest.advanceTimersByTimeAsync(1000);
    expect(FakeSocket.all).toHaveLength(2);
    expect(model.connection.phase).toBe('reconnecting');
    connection.dispose();
  });

  it.each([403, 401])('stops retrying when the server refuses the user (%i)', async status => {
    const model = new GpuPanelModel();
    const connection = connect(model);
    api.requestAPI.mockRejectedValue(responseError(status));
    connection.start();
    await jest.advanceTimersByTimeAsync(0);
    const polls = api.fetchClusters.mock.calls.length;
    lastSocket().drop();
    await jest.advanceTimersByTimeAsync(0);
    expect(model.connection).toEqual({
      phase: 'forbidden',
      attempt: 1,
      retryAt: null,
      error: forbiddenMessage(status)
    });
    expect(model.connection.error).toBe(
      `The server refused the GPU panel (${status}): sign in again or reload the page.`
    );
    for (let i = 0; i < 10; i++) {
      await jest.advanceTimersByTimeAsync(60_000); // far beyond the longest backoff
    }
    expect(FakeSocket.all).toHaveLength(1); // no further socket
    expect(api.fetchClusters.mock.calls.length).toBe(polls); // nor polls
    expect(model.connection.phase).toBe('forbidden');
    connection.dispose();
  });

  it('closes a retry socket opened before a slow probe answered 403', async () => {
    const model = new GpuPanelModel();
    const connection = connect(model);
    let refuse: (error: Error) => void = () => undefined;
    api.requestAPI.mockImplementation(
      () => new Promise((_, reject) => (refuse = reject))
    );
    connection.start();
    lastSocket().drop();
    await jest.advanceTimersByTimeAsync(1000); // the retry is due before the probe answers
    expect(FakeSocket.all).toHaveLength(2);
    refuse(responseError(403));
    await jest.advanceTimersByTimeAsync(0);
    expect(model.connection.phase).toBe('forbidden');
    expect(lastSocket().readyState).toBe(FakeSocket.CLOSED);
    await jest.advanceTimersByTimeAsync(120_000);
    expect(FakeSocket.all).toHaveLength(2);
    connection.dispose();
  });

  it('ignores a 403 probe that answers after stop', async () => {
    const model = new GpuPanelModel();
    const connection = connect(model);
    let refuse: (error: Error) => void = () => undefined;
    api.requestAPI.mockImplementation(
      () => new Promise((_, reject) => (refuse = reject))
    );
    connection.start();
    lastSocket().drop();
    connection.stop();
    refuse(responseError(403));
    await jest.advanceTimersByTimeAsync(0);
    expect(model.connection.phase).toBe('idle');
    connection.dispose();
  });

  it('Retry connects again after a refusal, with a fresh backoff', async () => {
    const model = new GpuPanelModel();
    const connection = connect(model);
    api.requestAPI.mockRejectedValue(responseError(403));
    connection.start();
    lastSocket().drop();
    await jest.advanceTimersByTimeAsync(0);
    expect(model.connection.phase).toBe('forbidden');
    const polls = api.fetchClusters.mock.calls.length;

    api.requestAPI.mockImplementation(async () => ({})); // signed in again
    connection.retry();
    expect(FakeSocket.all).toHaveLength(2);
    expect(model.connection.phase).toBe('connecting');
    await jest.advanceTimersByTimeAsync(0);
    expect(api.fetchClusters.mock.calls.length).toBe(polls + 1); // the lists poll again too
    lastSocket().open();
    expect(model.connection).toEqual({ phase: 'open', attempt: 0, retryAt: null, error: null });
    expect(lastSocket().sent).toEqual([{ type: 'configure', interval: 500 }]);
    connection.dispose();
  });

  it('Retry while still refused ends forbidden again, without a loop', async () => {
    const model = new GpuPanelModel();
    const connection = connect(model);
    api.requestAPI.mockRejectedValue(responseError(403));
    connection.start();
    lastSocket().drop();
    await jest.advanceTimersByTimeAsync(0);
    connection.retry();
    lastSocket().drop();
    await jest.advanceTimersByTimeAsync(0);
    expect(model.connection.phase).toBe('forbidden');
    await jest.advanceTimersByTimeAsync(120_000);
    expect(FakeSocket.all).toHaveLength(2);
    connection.dispose();
  });
});

describe('errorStatus', () => {
  it('reads the status of a response error, and nothing else', () => {
    expect(errorStatus(responseError(403))).toBe(403);
    expect(errorStatus(new Error('network'))).toBeNull();
    expect(errorStatus({ response: { status: '403' } })).toBeNull();
    expect(errorStatus(null)).toBeNull();
    expect(errorStatus('403')).toBeNull();
  });
});
