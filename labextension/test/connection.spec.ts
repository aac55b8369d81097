import { MonitorConnection } from '../src/connection';
import { GpuPanelModel } from '../src/model';
import { reading, snapshot } from './fixtures';

jest.mock('@jupyterlab/services', () => ({
  ServerConnection: { makeSettings: () => ({}) }
}));

jest.mock('../src/api', () => ({
  fetchClusters: jest.fn(async () => ({ clusters: [] })),
  fetchHistory: jest.fn(async () => ({ snapshots: [] })),
  fetchProcesses: jest.fn(async () => ({
    time: null,
    status: null,
    processes: [],
    unreadable_gpus: []
  })),
  socketUrl: () => 'ws://localhost/gpu-magics/api/ws'
}));

const api = jest.requireMock('../src/api') as {
  fetchClusters: jest.Mock;
  fetchProcesses: jest.Mock;
};

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
  });

  afterEach(() => {
    jest.useRealTimers();
    jest.restoreAllMocks();
    delete globals['window'];
    delete globals['WebSocket'];
  });

  it('polls clusters and holders at once, then every 3 s, and not after stop', async () => {
    const model = new GpuPanelModel();
    const connection = connect(model);
    connection.start();
    await jest.advanceTimersByTimeAsync(0);
    expect(api.fetchClusters).toHaveBeenCalledTimes(1);
    expect(api.fetchProcesses).toHaveBeenCalledTimes(1);
    await jest.advanceTimersByTimeAsync(3000);
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
      config: { interval: 1000, slow_interval: 2000, history: 600, source: 'fake' },
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
});
