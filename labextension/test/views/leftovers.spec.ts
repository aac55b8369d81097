/** @jest-environment jsdom */
import type { ILeftoverGroup } from '../../src/model/panelModel';
import { leftoverGroups } from '../../src/model/panelModel';
import type { IEndLeftoversReply, IIdleHold } from '../../src/types';
import { ClustersView } from '../../src/views/sections/clusters';
import { ILeftoverActions, ILeftoversState, LeftoversView, outcomeLines, processesText } from '../../src/views/sections/leftovers';
import { cluster, idleHold, leftover } from '../fixtures';

const LINE = 'left by a kernel that has ended: 2 processes hold 8.0 GiB on GPU 1';

function groups(): ILeftoverGroup[] {
  return leftoverGroups({ time: 1, leftovers: [leftover(11), leftover(12)], summary: [LINE] });
}

/** Actions that record what they were asked; the answer to End is set per test. */
class FakeActions implements ILeftoverActions {
  confirmed: ILeftoverGroup[] = [];
  ended: { pid: number; started: number }[][] = [];
  confirm = true;
  reply: Promise<IEndLeftoversReply> = Promise.resolve({
    results: [
      { pid: 11, ended: true, reason: null },
      { pid: 12, ended: false, reason: 'pid 12 is no longer the process its kernel started' }
    ],
    time: 2,
    leftovers: [],
    summary: []
  });

  confirmEndLeftovers(group: ILeftoverGroup): Promise<boolean> {
    this.confirmed.push(group);
    return Promise.resolve(this.confirm);
  }
  endLeftovers(processes: { pid: number; started: number }[]): Promise<IEndLeftoversReply> {
    this.ended.push(processes);
    return this.reply;
  }
}

function state(overrides: Partial<ILeftoversState> = {}): ILeftoversState {
  return { leftovers: groups(), clusters: [], idleHolds: [], ...overrides };
}

function setUp(shown: ILeftoversState = state()): { view: LeftoversView; actions: FakeActions } {
  const actions = new FakeActions();
  const view: LeftoversView = new LeftoversView(actions, () => view.render(shown));
  view.render(shown);
  return { view, actions };
}

function endButton(view: LeftoversView): HTMLButtonElement {
  return view.node.querySelector('.jp-GpuMagics-leftover button') as HTMLButtonElement;
}

async function settle(): Promise<void> {
  for (let i = 0; i < 5; i++) {
    await Promise.resolve();
  }
}

describe('LeftoversView', () => {
  it('shows nothing when no kernel left anything', () => {
    const { view } = setUp(state({ leftovers: [] }));
    expect(view.node.hidden).toBe(true);
    expect(view.node.children).toHaveLength(0);
  });

  it('says what ended kernels left on each GPU, with the processes and End them', () => {
    const { view } = setUp();
    expect(view.node.hidden).toBe(false);
    const row = view.node.querySelector('.jp-GpuMagics-leftover');
    expect(row?.getAttribute('data-gpu')).toBe('GPU 1');
    expect(row?.querySelector('.jp-GpuMagics-leftoverLine')?.textContent).toBe(
      'Left by a kernel that has ended: 2 processes hold 8.0 GiB on GPU 1'
    );
    expect(row?.querySelector('.jp-GpuMagics-leftoverLine .jp-GpuMagics-nowrap')?.textContent).toBe('GPU 1');
    // a process is not cut over two lines
    expect(Array.from(row?.querySelectorAll('.jp-GpuMagics-leftoverProcesses .jp-GpuMagics-nowrap') ?? [], n => n.textContent)).toEqual([
      'pid 11 python, 4.0 GiB',
      'pid 12 python, 4.0 GiB'
    ]);
    expect(row?.querySelector('.jp-GpuMagics-leftoverProcesses')?.textContent).toBe(
      'pid 11 python, 4.0 GiB \u00b7 pid 12 python, 4.0 GiB'
    );
    expect(endButton(view).textContent).toBe('End them');
    expect(endButton(view).disabled).toBe(false);
  });

  it('names a few of many processes, and posts them all', async () => {
    const many = Array.from({ length: 9 }, (_, i) => leftover(20 + i, { used_memory: 2 ** 20 }));
    const [group] = leftoverGroups({ time: 1, leftovers: many, summary: [] });
    const { view, actions } = setUp(state({ leftovers: [group as ILeftoverGroup] }));
    const listed = view.node.querySelector('.jp-GpuMagics-leftoverProcesses');
    expect(listed?.querySelectorAll('.jp-GpuMagics-nowrap')).toHaveLength(6);
    expect(listed?.textContent).toMatch(/pid 25 python, 1\.0 MiB and 3 more$/);
    endButton(view).click();
    await settle();
    expect(actions.ended[0]?.map(p => p.pid)).toEqual([20, 21, 22, 23, 24, 25, 26, 27, 28]);
  });

  it('ends nothing when the user cancels', async () => {
    const { view, actions } = setUp();
    actions.confirm = false;
    endButton(view).click();
    await settle();
    expect(actions.confirmed.map(group => group.gpuLabel)).toEqual(['GPU 1']);
    expect(actions.ended).toEqual([]);
    expect(view.node.querySelector('.jp-GpuMagics-leftoversOutcome')).toBeNull();
  });

  it('posts the pids with their start times once confirmed, and says what was ended and why not', async () => {
    const { view, actions } = setUp();
    let finish: (reply: IEndLeftoversReply) => void = () => undefined;
    actions.reply = new Promise(resolve => (finish = resolve));
    endButton(view).click();
    await settle();
    expect(actions.ended).toEqual([
      [
        { pid: 11, started: 1700000011.25 },
        { pid: 12, started: 1700000012.25 }
      ]
    ]);
    expect(endButton(view).textContent).toBe('Ending\u2026');
    expect(endButton(view).disabled).toBe(true);
    finish({
      results: [
        { pid: 11, ended: true, reason: null },
        { pid: 12, ended: false, reason: 'pid 12 is no longer the process its kernel started' }
      ],
      time: 2,
      leftovers: [],
      summary: []
    });
    await settle();
    const outcome = view.node.querySelector('.jp-GpuMagics-leftoversOutcome');
    expect(Array.from(outcome?.children ?? [], line => line.textContent)).toEqual([
      'Ended pid 11.',
      'Not ended: pid 12 is no longer the process its kernel started.'
    ]);
    expect(outcome?.classList.contains('jp-GpuMagics-error')).toBe(true); // not all of it was ended
    expect(endButton(view).disabled).toBe(false);
  });

  it('says why nothing was ended when the request fails', async () => {
    const { view, actions } = setUp();
    actions.reply = Promise.reject(new Error('HTTP 403'));
    endButton(view).click();
    await settle();
    expect(view.node.querySelector('.jp-GpuMagics-leftoversOutcome')?.textContent).toBe('Could not end them: HTTP 403');
  });

  it('keeps what it did in view for a while, then shows nothing once nothing is left', async () => {
    const { view, actions } = setUp();
    actions.reply = Promise.resolve({ results: [{ pid: 11, ended: true, reason: null }, { pid: 12, ended: true, reason: null }], time: 2, leftovers: [], summary: [] });
    endButton(view).click();
    await settle();
    const now = Date.now() / 1000;
    view.render(state({ leftovers: [] }), now + 1);
    expect(view.node.hidden).toBe(false);
    expect(view.node.textContent).toBe('Ended pid 11 and pid 12.');
    expect(view.node.querySelector('.jp-GpuMagics-leftoversOutcome')?.classList.contains('jp-GpuMagics-note')).toBe(true);
    view.render(state({ leftovers: [] }), now + 60);
    expect(view.node.hidden).toBe(true);
  });

  it('lists the idle holds of kernels without a cluster card; those with one say it on the card', () => {
    const holds: IIdleHold[] = [idleHold('k-card'), idleHold('k-alone', { path: 'ranks.ipynb', cluster: null, line: 'holds 2.0 GiB on GPU 0, idle for 40 min' })];
    const { view } = setUp(state({ leftovers: [], clusters: [cluster({ kernel_id: 'k-card' })], idleHolds: holds }));
    expect(Array.from(view.node.querySelectorAll('.jp-GpuMagics-idleHold'), node => node.textContent)).toEqual([
      'ranks.ipynb holds 2.0 GiB on GPU 0, idle for 40 min'
    ]);
  });
});

describe('the idle-hold line on a cluster card', () => {
  const hold = idleHold('k1');
  const shown = {
    clusters: [cluster({ name: 'mine', kernel_id: 'k1' }), cluster({ name: 'other', kernel_id: 'k2', pid: 2 })],
    clustersError: null,
    connection: { phase: 'open' as const },
    idleHold: (kernelId: string | null) => (kernelId === 'k1' ? hold : null)
  };

  it('shows on the card of the kernel it belongs to, under its notebook line', () => {
    const view = new ClustersView(
      {
        cluster: () => Promise.resolve(),
        askWorkers: () => Promise.resolve(null),
        askAdapt: () => Promise.resolve(null),
        confirmStop: () => Promise.resolve(false),
        confirmRestart: () => Promise.resolve(false),
        openPath: () => undefined
      },
      () => undefined
    );
    view.render(shown, 1000);
    const mine = view.node.querySelector('[data-cluster="mine"]');
    const line = mine?.querySelector(':scope > .jp-GpuMagics-idleHold');
    expect(line?.textContent).toBe(`This notebook ${hold.line}`);
    // the commands that give it back are not cut over two lines
    expect(Array.from(line?.querySelectorAll('.jp-GpuMagics-nowrap') ?? [], n => n.textContent)).toEqual([
      '(%gpucluster free)',
      '(%gpucluster stop)'
    ]);
    expect(line?.previousElementSibling?.classList.contains('jp-GpuMagics-clusterMeta') || line?.previousElementSibling?.classList.contains('jp-GpuMagics-idle')).toBe(true);
    expect(view.node.querySelector('[data-cluster="other"] .jp-GpuMagics-idleHold')).toBeNull();
  });
});

describe('outcomeLines and processesText', () => {
  it('name each process, and say when no figure is known', () => {
    expect(outcomeLines([])).toEqual([]);
    expect(outcomeLines([{ pid: 1, ended: true, reason: null }, { pid: 2, ended: true, reason: null }, { pid: 3, ended: true, reason: null }])).toEqual(['Ended pid 1, pid 2 and pid 3.']);
    expect(outcomeLines([{ pid: 4, ended: false, reason: null }])).toEqual(['Not ended: pid 4 (the server did not say why).']);
    const [group] = leftoverGroups({ time: 1, leftovers: [leftover(5, { used_memory: null, name: 'pt_data_worker' })], summary: [] });
    expect(processesText(group as ILeftoverGroup)).toBe('pid 5 pt_data_worker');
  });
});
