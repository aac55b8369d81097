/** @jest-environment jsdom */
/**
 * The side panel on a shared GPU server: GPUs others use (marked on the cards and the members), what each process
 * says it holds (arrays, cached, context), "Free cached" per notebook and per cluster, and the idle time left.
 */
import { clusterCached, clusterCommand, FREE_NOTEBOOK_COMMAND, idleText } from '../../src/model/clusters';
import type { ClusterAction } from '../../src/model/clusters';
import { formatDuration } from '../../src/format';
import { GpuPanelModel, IOwnerTotal, othersText, splitText } from '../../src/model/panelModel';
import type { ICluster, IGpuOtherUse } from '../../src/types';
import { ClustersView, IClusterActions } from '../../src/views/sections/clusters';
import { GpuCardsView } from '../../src/views/sections/gpuCards';
import { membersView } from '../../src/views/sections/members';
import { MemoryView } from '../../src/views/sections/memory';
import { cluster, holder, member, memberGpu, processesReply, reading, snapshot } from '../fixtures';

const GIB = 2 ** 30;

function text(node: Element | null | undefined): string {
  return node?.textContent ?? '';
}

function others(overrides: Partial<IGpuOtherUse> = {}): IGpuOtherUse {
  return {
    gpu: 0,
    gpu_uuid: 'GPU-0',
    gpu_label: 'GPU 0',
    bytes: 40 * GIB,
    pids: [4242],
    how: 'nvml',
    unknown: 0,
    ...overrides
  };
}

describe('words', () => {
  it('say who else holds memory on a GPU', () => {
    expect(othersText({ bytes: 40 * GIB, pids: [4242] })).toBe('pid 4242 holds 40.0 GiB');
    expect(othersText({ bytes: 40 * GIB, pids: [1, 2] })).toBe('2 other processes hold 40.0 GiB (pid 1, 2)');
    expect(othersText({ bytes: 3 * GIB, pids: [1, 2, 3, 4, 5] })).toBe(
      '5 other processes hold 3.0 GiB (pid 1, 2, 3, 4, ...)'
    );
    expect(othersText({ bytes: 12 * GIB, pids: [] })).toBe('12.0 GiB in use that no process of yours reports');
  });

  it('split what a process holds three ways, leaving out what it does not say', () => {
    expect(splitText(GIB, 10 * GIB, 512 * 2 ** 20)).toBe('1.0 GiB arrays \u00b7 10.0 GiB cached \u00b7 512 MiB context');
    expect(splitText(null, 4 * GIB, null)).toBe('4.0 GiB cached');
    expect(splitText(null, null, undefined)).toBe('');
  });

  it('give the idle timeout and the time left', () => {
    expect(formatDuration(45)).toBe('45 s');
    expect(formatDuration(1800)).toBe('30 min');
    expect(formatDuration(5400)).toBe('1 h 30 min');
    expect(formatDuration(7200)).toBe('2 h');
    const busy = cluster({ kind: 'gpu', idle_timeout: 1800, idle_since: null });
    expect(idleText(busy, 1000)).toBe('closes after 30 min without a task');
    const idle = cluster({ kind: 'gpu', idle_timeout: 1800, idle_since: 1000 - 300 });
    expect(idleText(idle, 1000)).toBe('idle 5 min \u00b7 closes in 25 min');
    const late = cluster({ kind: 'gpu', idle_timeout: 60, idle_since: 0 });
    expect(idleText(late, 1000)).toBe('idle 17 min \u00b7 closes in 0 s');
    const attached = cluster({ kind: 'attached', idle_timeout: 600, idle_since: 1000 - 60 });
    expect(idleText(attached, 1000)).toBe('idle 1 min \u00b7 detaches in 9 min');
    expect(idleText(cluster(), 1000)).toBeNull();
  });

  it('name the magic each Free cached runs', () => {
    expect(clusterCommand({ action: 'free' })).toBe('%gpucluster free workers');
    expect(FREE_NOTEBOOK_COMMAND).toBe('%gpucluster free');
  });
});

describe('GPU cards on a shared server', () => {
  it('mark a GPU that others use, on this host only, and keep the card the same height', () => {
    const model = new GpuPanelModel();
    model.applySnapshot(
      snapshot(1, [reading(0), reading(1), reading(2, { host: '127.0.0.2', uuid: 'GPU-remote', nvml_index: 0 })])
    );
    model.setHolders(
      processesReply({ others: [others(), others({ gpu: 2, gpu_uuid: 'x', pids: [], how: 'unexplained' })] })
    );
    const view = new GpuCardsView();
    view.render(model);
    const cards = Array.from(view.node.querySelectorAll<HTMLElement>('.jp-GpuMagics-card'));
    const badges = cards.map(card => card.querySelector('.jp-GpuMagics-others'));
    expect(badges.map(text)).toEqual(['others', '', '']);
    expect(badges[0]?.getAttribute('title')).toBe(
      'Busy with work that is not your notebooks\u2019: pid 4242 holds 40.0 GiB'
    );
    expect(cards.map(card => card.dataset.others ?? '')).toEqual(['true', '', '']);
    // the badge sits in the title line: no line is added; the memory bar's last segment is others' part
    expect(badges[0]?.parentElement?.classList.contains('jp-GpuMagics-cardTitle')).toBe(true);
    const bar = cards[0]?.querySelector('.jp-GpuMagics-memoryBar') as HTMLElement;
    expect(bar.title).toBe('GPU memory in use: 25% of 100 B; 40.0 GiB of it others\u2019 (pid 4242 holds 40.0 GiB)');
    const fills = Array.from(bar.querySelectorAll<HTMLElement>('.jp-GpuMagics-barFill'), f => [f.className, f.style.width]);
    expect(fills).toEqual([
      ['jp-GpuMagics-barFill', '0.0%'],
      ['jp-GpuMagics-barFill jp-GpuMagics-barOthers', '25.0%']
    ]);
    expect(cards[1]?.querySelectorAll('.jp-GpuMagics-barFill')).toHaveLength(1);
  });
});

describe('memory by notebook on a shared server', () => {
  function owners(reporting: string[], cached = 10 * GIB): GpuPanelModel {
    const model = new GpuPanelModel();
    model.setHolders(
      processesReply({
        processes: [
          holder({
            pid: 7,
            kernel_id: 'k1',
            path: 'train.ipynb',
            used_memory: 11.5 * GIB,
            source: 'nvml+self-report',
            array_memory: GIB,
            cached_memory: cached,
            context_memory: 0.5 * GIB
          }),
          holder({ pid: 4242, kernel_id: null, path: null, role: 'other', used_memory: 40 * GIB, user: 'bob', yours: false })
        ],
        reporting_kernels: reporting
      })
    );
    return model;
  }

  it('shows what a kernel holds three ways, and Free cached where its kernel reports', async () => {
    const freed: IOwnerTotal[] = [];
    let finish: () => void = () => undefined;
    const model = owners(['k1']);
    const view: MemoryView = new MemoryView(
      {
        freeCached: owner => {
          freed.push(owner);
          return new Promise(resolve => (finish = resolve));
        }
      },
      () => view.render(model)
    );
    view.render(model);
    const blocks = Array.from(view.node.querySelectorAll<HTMLElement>('.jp-GpuMagics-owner'));
    expect(blocks.map(block => block.dataset.owner)).toEqual(['pid 4242', 'train.ipynb']);
    const others = blocks[0] as HTMLElement; // its pid once, whose it is on its GPU's line, and the account on hover
    expect(others.querySelector('.jp-GpuMagics-holder span')?.textContent).toBe('GPU 0 \u00b7 another user\u2019s process');
    expect(others.querySelector('.jp-GpuMagics-ownerName')?.getAttribute('title')).toBe('pid 4242: another user\u2019s (bob)');
    const notebook = blocks[1] as HTMLElement;
    const split = notebook.querySelector('.jp-GpuMagics-split') as HTMLElement;
    const parts = Array.from(split.querySelectorAll('.jp-GpuMagics-part'), part =>
      Array.from(part.children, child => child.textContent)
    );
    expect(parts).toEqual([
      ['1.0 GiB', 'arrays'],
      ['10.0 GiB', 'cached'],
      ['512 MiB', 'context']
    ]);
    expect(split.querySelector('[data-part="cached"]')?.hasAttribute('data-some')).toBe(true);
    expect(split.title).toMatch(/^1.0 GiB arrays \u00b7 10.0 GiB cached \u00b7 512 MiB context: what the process/);
    expect(blocks[0]?.querySelector('.jp-GpuMagics-split')).toBeNull(); // NVML alone does not say
    expect(blocks[0]?.querySelector('button')).toBeNull(); // not a notebook of this server
    const button = notebook.querySelector('button') as HTMLButtonElement;
    expect(text(button)).toBe('Free cached');
    expect(button.disabled).toBe(false);
    expect(button.title).toContain('the kernel and its cluster\u2019s workers give the 10.0 GiB their memory pools');
    button.click();
    expect(freed.map(owner => owner.kernelId)).toEqual(['k1']);
    const busy = view.node.querySelector('[data-owner="train.ipynb"]') as HTMLElement;
    expect(text(busy.querySelector('.jp-GpuMagics-busy'))).toContain('Freeing');
    expect((busy.querySelector('button') as HTMLButtonElement).disabled).toBe(true);
    finish();
    await Promise.resolve();
    await Promise.resolve();
    expect(view.node.querySelector('.jp-GpuMagics-busy')).toBeNull();
  });

  it('says why Free cached failed, and offers none where nothing is cached or the kernel does not report', async () => {
    const model = owners(['k1']);
    const view: MemoryView = new MemoryView(
      { freeCached: () => Promise.reject(new Error('UsageError: no pool')) },
      () => view.render(model)
    );
    view.render(model);
    (view.node.querySelector('[data-owner="train.ipynb"] button') as HTMLButtonElement).click();
    await new Promise(resolve => setTimeout(resolve, 0));
    expect(text(view.node.querySelector('[data-owner="train.ipynb"] .jp-GpuMagics-error'))).toBe(
      'UsageError: no pool'
    );

    const nothing = new MemoryView({ freeCached: () => Promise.resolve() });
    nothing.render(owners(['k1'], 0));
    const idle = nothing.node.querySelector('[data-owner="train.ipynb"] button') as HTMLButtonElement;
    expect(idle.disabled).toBe(true);
    expect(idle.title).toBe('Its memory pools cache nothing');

    const silent = new MemoryView({ freeCached: () => Promise.resolve() });
    silent.render(owners([]));
    expect(silent.node.querySelector('button')).toBeNull();
  });
});

class Recorder implements IClusterActions {
  calls: ClusterAction[] = [];
  cluster(_: ICluster, request: ClusterAction): Promise<void> {
    this.calls.push(request);
    return Promise.resolve();
  }
  askWorkers(): Promise<number | null> {
    return Promise.resolve(null);
  }
  askAdapt(): Promise<[number, number] | null> {
    return Promise.resolve(null);
  }
  confirmStop(): Promise<boolean> {
    return Promise.resolve(false);
  }
  confirmRestart(): Promise<boolean> {
    return Promise.resolve(false);
  }
  openPath(): void {
    return undefined;
  }
}

describe('clusters on a shared server', () => {
  const workers = [
    member('w-0', '127.0.0.1', [
      memberGpu('127.0.0.1', 0, {
        array_memory: 2 * GIB,
        cached_memory: 6 * GIB,
        context_memory: 0.5 * GIB,
        others: { bytes: 40 * GIB, pids: [4242], how: 'nvml', unknown: 0 }
      })
    ]),
    member('w-1', '127.0.0.1', [memberGpu('127.0.0.1', 1, { array_memory: 0, cached_memory: 2 * GIB })])
  ];

  it('show the time left before an idle cluster closes, and Free cached on its workers', () => {
    const shown = cluster({ kind: 'gpu', members: workers, idle_timeout: 1800, idle_since: 700 });
    expect(clusterCached(shown)).toBe(8 * GIB);
    const actions = new Recorder();
    const view: ClustersView = new ClustersView(actions, () => undefined);
    view.render({ clusters: [shown], clustersError: null, connection: { phase: 'open' } }, 1000);
    const idle = view.node.querySelector('.jp-GpuMagics-idle') as HTMLElement;
    expect(text(idle)).toBe('idle 5 min \u00b7 closes in 25 min');
    expect(idle.dataset.idle).toBe('idle');
    view.render({ clusters: [{ ...shown, idle_since: 1000 - 1700 }], clustersError: null, connection: { phase: 'open' } }, 1000);
    const closing = view.node.querySelector('.jp-GpuMagics-idle') as HTMLElement;
    expect([closing.textContent, closing.dataset.idle]).toEqual(['idle 28 min \u00b7 closes in 2 min', 'closing']);
    view.render({ clusters: [shown], clustersError: null, connection: { phase: 'open' } }, 1000);
    const rows = Array.from(view.node.querySelectorAll('.jp-GpuMagics-buttons'), r =>
      Array.from(r.querySelectorAll('button'), text)
    );
    expect(rows).toEqual([['Park'], ['Free cached'], ['Stop', 'Restart', 'Scale', 'Adapt']]); // Free: under the figures
    const members = view.node.querySelector('.jp-GpuMagics-members') as HTMLElement;
    expect(members.nextElementSibling?.classList.contains('jp-GpuMagics-freeButtons')).toBe(true);
    const free = Array.from(view.node.querySelectorAll<HTMLButtonElement>('button')).find(
      b => b.textContent === 'Free cached'
    ) as HTMLButtonElement;
    expect(free.title).toContain('the 8.0 GiB their memory pools cache');
    free.click();
    expect(actions.calls).toEqual([{ action: 'free' }]);
  });

  it("say where the notebook's plain cells run: its session backend, or dask's own settings", () => {
    const view: ClustersView = new ClustersView(new Recorder(), () => undefined);
    const plain = (backend: string | null): HTMLElement => {
      view.render(
        { clusters: [cluster({ kind: 'gpu', plain_cells: backend })], clustersError: null, connection: { phase: 'open' } },
        1000
      );
      return view.node.querySelector('.jp-GpuMagics-plainCells') as HTMLElement;
    };
    const session = plain('multi-gpu');
    expect([session.textContent, session.dataset.plainCells]).toEqual(['plain cells: multi-gpu (%gpurun)', 'multi-gpu']);
    const own = plain(null);
    expect(own.textContent).toBe("plain cells: dask's own settings");
    expect(own.title).toContain('%gpurun multi-gpu');
  });

  it('let an attached cluster free its workers and say it only detaches', () => {
    const attached = cluster({ kind: 'attached', members: workers, idle_timeout: 600, idle_since: null });
    const view = new ClustersView(new Recorder(), () => undefined);
    view.render({ clusters: [attached], clustersError: null, connection: { phase: 'open' } }, 1000);
    expect(text(view.node.querySelector('.jp-GpuMagics-idle'))).toBe('detaches after 10 min without a task');
    const enabled = Array.from(view.node.querySelectorAll<HTMLButtonElement>('button'))
      .filter(b => !b.disabled)
      .map(text);
    expect(enabled).toEqual(['Free cached', 'Detach']); // stop detaches the notebook from it
  });

  it('offer no Free cached where no worker says what it caches', () => {
    const view = new ClustersView(new Recorder(), () => undefined);
    view.render({ clusters: [cluster({ kind: 'cpu' })], clustersError: null, connection: { phase: 'open' } }, 1000);
    expect(Array.from(view.node.querySelectorAll('button'), text)).toEqual(['Stop', 'Restart', 'Scale', 'Adapt']);
    expect(view.node.querySelector('.jp-GpuMagics-idle')).toBeNull();
  });

  it('mark a member GPU that others use, with the three figures under its line', () => {
    const kernel = member('kernel', '127.0.0.1', [memberGpu('127.0.0.1', 1, { memory_used: null, cached_memory: GIB })], {
      role: 'kernel'
    });
    const view = membersView([...workers, kernel]);
    const notes = Array.from(view.querySelectorAll('.jp-GpuMagics-memberNote'), text);
    expect(notes).toEqual(['others pid 4242 holds 40.0 GiB']);
    const splits = Array.from(view.querySelectorAll<HTMLElement>('.jp-GpuMagics-split'), split => split.title);
    expect(splits).toEqual([
      '1.0 GiB cached: what the process holds',
      '2.0 GiB arrays \u00b7 6.0 GiB cached \u00b7 512 MiB context: what the process holds',
      '0 B arrays \u00b7 2.0 GiB cached: what the process holds'
    ]);
    // the kernel's line names it only: the GPU's figures are on its worker's line
    const own = view.querySelector('.jp-GpuMagics-memberOwn') as HTMLElement;
    expect(Array.from(own.children, text)).toEqual(['GPU 1 \u00b7 kernel']);
    expect(view.querySelector('.jp-GpuMagics-memberOthers')?.getAttribute('title')).toBe(
      'Busy with work that is not this cluster\u2019s: pid 4242 holds 40.0 GiB'
    );
    // the GPU lines themselves stay one line each
    expect(view.querySelectorAll('.jp-GpuMagics-memberGpu')).toHaveLength(3);
  });
});
