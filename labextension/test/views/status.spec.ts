/** @jest-environment jsdom */
import type { IConnectionState } from '../../src/model/panelModel';
import { IStatusState, StatusView, statusProblems, statusText } from '../../src/views/sections/status';

function state(connection: Partial<IConnectionState>, overrides: Partial<IStatusState> = {}): IStatusState {
  return {
    connection: { phase: 'open', attempt: 0, retryAt: null, error: null, ...connection },
    interval: null,
    config: null,
    noGpu: false,
    starting: false,
    unavailableReason: null,
    ...overrides
  };
}

const FAKE = {
  interval: 1000,
  slow_interval: 5000,
  history: 300,
  source: 'fake',
  cpu_cluster: '%gpucluster --cpu-workers 2',
  gpu_packages: false
};

describe('statusText', () => {
  it('says how the panel is connected', () => {
    expect(statusText(state({}))).toBe('Live');
    expect(statusText(state({}, { interval: 500, config: FAKE }))).toBe('Live, every 500 ms (simulated GPUs)');
    expect(statusText(state({}, { noGpu: true }))).toBe('Connected \u00b7 no GPU to sample');
    expect(statusText(state({ phase: 'connecting' }))).toBe('Connecting\u2026');
    expect(statusText(state({ phase: 'reconnecting', retryAt: 10_400 }), 7_000)).toBe('Reconnecting in 3 s');
    expect(statusText(state({ phase: 'reconnecting', retryAt: null }), 7_000)).toBe('Reconnecting\u2026');
    expect(statusText(state({ phase: 'forbidden' }))).toBe('Refused by the server');
    expect(statusText(state({ phase: 'idle' }))).toBe('Paused while hidden');
  });
});

describe('statusProblems', () => {
  it('names the connection error while reconnecting or refused, and why GPUs are missing', () => {
    expect(statusProblems(state({ error: 'closed' }))).toEqual([]);
    expect(statusProblems(state({ phase: 'reconnecting', error: 'closed' }))).toEqual(['closed']);
    expect(statusProblems(state({}, { unavailableReason: 'NVML failed' }))).toEqual(['GPUs unavailable: NVML failed']);
    expect(statusProblems(state({}, { unavailableReason: 'starting: x', starting: true }))).toEqual([
      'Reading the GPUs for the first time\u2026'
    ]);
  });

  it('says how old the figures are when the server\u2019s reading after its pause is late, not that GPUs are missing', () => {
    const stale = 'stale: read 17 min ago, before the monitor paused (no one watched); a new read is late';
    expect(statusProblems(state({}, { unavailableReason: stale }))).toEqual([
      'GPU figures read 17 min ago, before the monitor paused (no one watched); a new read is late.'
    ]);
  });

  it('raises no alarm for a server without GPUs, and only the refusal when refused', () => {
    expect(statusProblems(state({}, { unavailableReason: 'No GPUs found on the server.', noGpu: true }))).toEqual([]);
    expect(statusProblems(state({ phase: 'forbidden', error: 'refused (403)' }, { unavailableReason: 'x' }))).toEqual([
      'refused (403)'
    ]);
  });
});

describe('StatusView', () => {
  it('hides the banner when all is well and tags both with the phase', () => {
    const view = new StatusView(() => undefined);
    view.render(state({}, { interval: 250 }));
    expect(view.status.textContent).toBe('Live, every 250 ms');
    expect(view.status.dataset.phase).toBe('open');
    expect(view.banner.hidden).toBe(true);
    expect(view.banner.dataset.phase).toBe('open');
    expect(view.banner.querySelector('button')).toBeNull();
  });

  it('offers Retry once the server refused the panel', () => {
    let retries = 0;
    const view = new StatusView(() => retries++);
    view.render(state({ phase: 'forbidden', error: 'The server refused the GPU panel (403).' }));
    expect(view.banner.hidden).toBe(false);
    expect(view.banner.firstElementChild?.textContent).toBe('The server refused the GPU panel (403).');
    const retry = view.banner.querySelector('button.jp-GpuMagics-retry') as HTMLButtonElement;
    expect(retry.textContent).toBe('Retry');
    expect(retry.title).toBe('Connect to the server again');
    expect(retry.disabled).toBe(false);
    retry.click();
    expect(retries).toBe(1);
    view.render(state({ phase: 'connecting' }));
    expect(view.banner.querySelector('button')).toBeNull();
  });
});
