/** @jest-environment jsdom */
import type { ClusterAction } from '../../src/model/clusters';
import type { ICluster } from '../../src/types';
import { ClustersView, IClusterActions, IClustersState } from '../../src/views/sections/clusters';
import { cluster, facts, member, memberGpu } from '../fixtures';

function text(node: Element | null | undefined): string {
  return node?.textContent ?? '';
}

/** Actions that record what they were asked, with answers and outcomes set per test. */
class FakeActions implements IClusterActions {
  calls: Array<[string, ClusterAction]> = [];
  opened: string[] = [];
  confirm = true;
  workers: number | null = 3;
  bounds: [number, number] | null = [0, 4];
  outcome: Promise<string[] | void> = Promise.resolve();

  cluster(c: ICluster, request: ClusterAction): Promise<string[] | void> {
    this.calls.push([c.name, request]);
    return this.outcome;
  }
  askWorkers(): Promise<number | null> {
    return Promise.resolve(this.workers);
  }
  askAdapt(): Promise<[number, number] | null> {
    return Promise.resolve(this.bounds);
  }
  confirmStop(): Promise<boolean> {
    return Promise.resolve(this.confirm);
  }
  confirmRestart(): Promise<boolean> {
    return Promise.resolve(this.confirm);
  }
  openPath(path: string): void {
    this.opened.push(path);
  }
}

function state(clusters: ICluster[], overrides: Partial<IClustersState> = {}): IClustersState {
  return { clusters, clustersError: null, connection: { phase: 'open' }, ...overrides };
}

/** A view that renders again whenever it says it changed, as the panel does (there a frame later). */
function setUp(clusters: ICluster[]): { view: ClustersView; actions: FakeActions } {
  const actions = new FakeActions();
  const view: ClustersView = new ClustersView(actions, () => view.render(state(clusters), 1000));
  view.render(state(clusters), 1000);
  return { view, actions };
}

function buttons(view: ClustersView): HTMLButtonElement[] {
  return Array.from(view.node.querySelectorAll<HTMLButtonElement>('.jp-GpuMagics-buttons button'));
}

function click(view: ClustersView, label: string): void {
  const target = buttons(view).find(b => b.textContent === label);
  if (target === undefined) {
    throw new Error(`no ${label} button`);
  }
  target.click();
}

/** Let the promises of a click settle (dialogs, then the kernel's answer). */
async function settle(): Promise<void> {
  for (let i = 0; i < 5; i++) {
    await Promise.resolve();
  }
}

describe('ClustersView', () => {
  it('says how to start a cluster when there is none, and the list error unless the server refused the panel', () => {
    const view = new ClustersView(new FakeActions(), () => undefined);
    view.render(state([], { clustersError: 'Cannot list clusters', startClusterCommand: '%gpucluster --cpu-workers 2' }));
    expect(Array.from(view.node.children, text)).toEqual([
      'Cannot list clusters',
      'No cluster running. Start one from a notebook with %gpucluster --cpu-workers 2.'
    ]);
    expect(text(view.node.querySelector('.jp-GpuMagics-empty code'))).toBe('%gpucluster --cpu-workers 2');
    view.render(state([], { clustersError: 'Cannot list clusters', connection: { phase: 'forbidden' } }));
    expect(view.node.querySelector('.jp-GpuMagics-error')).toBeNull();
  });

  it("tells a gateway cluster's own age, not the notebook's connection to it", () => {
    const c = cluster({ name: 'default.5b4e57c3', kind: 'gateway', workers: 1, started_at: 990, up_since: -6200 });
    const { view } = setUp([c]);
    const row = view.node.querySelector('[data-cluster="default.5b4e57c3"]') as HTMLElement;
    expect(text(row.querySelector('.jp-GpuMagics-clusterTitle strong'))).toBe('default.5b4e57c3');
    expect(text(row.querySelector('.jp-GpuMagics-clusterMeta'))).toContain('\u00b7 up 2.0 h \u00b7');
  });

  it('renders a row per cluster: name, kind, notebook, scheduler, uptime and dashboard', () => {
    const c = cluster({ name: 'work', kind: 'cpu', workers: 2, started_at: 880 });
    const { view } = setUp([c]);
    const row = view.node.querySelector('[data-cluster="work"]') as HTMLElement;
    expect(text(row.querySelector('.jp-GpuMagics-clusterTitle strong'))).toBe('work');
    expect(text(row.querySelector('.jp-GpuMagics-clusterKind'))).toBe('CPU cluster \u00b7 2 workers');
    expect(text(row.querySelector('.jp-GpuMagics-clusterMeta'))).toBe(
      'a.ipynb \u00b7 tcp://127.0.0.1:8786 \u00b7 up 2 min \u00b7 dashboard \u2197'
    );
    const dashboard = row.querySelector('a.jp-GpuMagics-dashboard') as HTMLAnchorElement;
    expect(dashboard.getAttribute('href')).toBe('http://127.0.0.1:8787/status');
    expect(dashboard.getAttribute('target')).toBe('_blank');
    expect(dashboard.getAttribute('title')).toBe('The Dask dashboard: http://127.0.0.1:8787/status');
    expect(row.querySelector('.jp-GpuMagics-dashboardNote')).toBeNull();
    expect(row.querySelector('.jp-GpuMagics-members')).toBeNull();
    expect(buttons(view).map(b => [b.textContent, b.disabled])).toEqual([
      ['Stop', false],
      ['Restart', false],
      ['Scale', false],
      ['Adapt', false]
    ]);
  });

  it('prefers the link made for this browser, with its note, and leaves the dashboard out without one', () => {
    const proxied = cluster({ name: 'p', dashboard_link: '/proxy/8787/status', dashboard_note: 'through the proxy' });
    const none = cluster({ name: 'n', dashboard_url: null, dashboard_note: 'no dashboard' });
    const { view } = setUp([proxied, none]);
    const p = view.node.querySelector('[data-cluster="p"]') as HTMLElement;
    const link = p.querySelector('a.jp-GpuMagics-dashboard');
    expect(link?.getAttribute('href')).toBe('/proxy/8787/status');
    expect(link?.getAttribute('title')).toBe('through the proxy');
    expect(text(p.querySelector('.jp-GpuMagics-dashboardNote'))).toBe('through the proxy');
    const n = view.node.querySelector('[data-cluster="n"]') as HTMLElement;
    expect(n.querySelector('a.jp-GpuMagics-dashboard')).toBeNull();
    expect(n.querySelector('.jp-GpuMagics-dashboardNote')).toBeNull();
  });

  it('opens the notebook from its link, and names the kernel where there is no notebook', () => {
    const { view, actions } = setUp([
      cluster({ name: 'a', path: 'dir/a.ipynb' }),
      cluster({ name: 'b', path: null, kernel_id: '0123456789abcdef' }),
      cluster({ name: 'c', path: null, kernel_id: null })
    ]);
    const link = view.node.querySelector('[data-cluster="a"] a.jp-GpuMagics-link') as HTMLAnchorElement;
    const event = new MouseEvent('click', { bubbles: true, cancelable: true });
    link.dispatchEvent(event);
    expect(event.defaultPrevented).toBe(true);
    expect(actions.opened).toEqual(['dir/a.ipynb']);
    const metas = Array.from(view.node.querySelectorAll('.jp-GpuMagics-clusterMeta'), m => text(m.firstElementChild));
    expect(metas).toEqual(['dir/a.ipynb', 'kernel 01234567', 'no kernel']);
  });

  it('offers what the manager allows, and nothing for kernels this server does not run', () => {
    const { view } = setUp([
      cluster({ name: 'att', kind: 'attached' }),
      cluster({ name: 'far', kernel_running: false })
    ]);
    const offered = (name: string) =>
      Array.from(view.node.querySelectorAll<HTMLButtonElement>(`[data-cluster="${name}"] .jp-GpuMagics-button`))
        .filter(b => !b.disabled)
        .map(b => b.textContent);
    expect(offered('att')).toEqual(['Detach']); // it detaches; its workers are not the notebook's to change
    expect(offered('far')).toEqual([]);
    expect(view.node.querySelector('[data-cluster="att"] .jp-GpuMagics-note')).toBeNull();
    expect(text(view.node.querySelector('[data-cluster="far"] .jp-GpuMagics-note'))).toBe(
      'Its kernel is not one of this server\u2019s: manage it from there.'
    );
  });

  it('offers no Restart and says "detaches" for a gateway cluster connected to or a --from cluster', () => {
    const connected = cluster({
      name: 'g',
      kind: 'gateway',
      idle_timeout: 1800,
      facts: facts({ owned: false, ends: 'detach', restartable: false, title: 'Dask Gateway', taken: 'connected at' })
    });
    const adopted = cluster({ name: 'k', kind: 'adopted', manager: 'KubeCluster', idle_timeout: 600 });
    const { view } = setUp([connected, adopted]);
    for (const name of ['g', 'k']) {
      const row = view.node.querySelector(`[data-cluster="${name}"]`) as HTMLElement;
      const offered = Array.from(row.querySelectorAll<HTMLButtonElement>('.jp-GpuMagics-button'))
        .filter(b => !b.disabled)
        .map(b => b.textContent);
      expect(offered).toEqual(['Detach', 'Scale', 'Adapt']);
      expect(text(row.querySelector('.jp-GpuMagics-idle'))).toMatch(/^detaches after /);
    }
  });

  it('shows the members by host', () => {
    const members = [member('w0', '10.0.0.1', [memberGpu('10.0.0.1', 0)])];
    const { view } = setUp([cluster({ kind: 'gpu', workers: 1, members })]);
    expect(Array.from(view.node.querySelectorAll('.jp-GpuMagics-host'), text)).toEqual(['10.0.0.1']);
    expect(view.node.querySelectorAll('.jp-GpuMagics-memberGpu')).toHaveLength(1);
  });

  it('stops a cluster once confirmed, saying so while the kernel works', async () => {
    const { view, actions } = setUp([cluster({ name: 'c' })]);
    let finish: () => void = () => undefined;
    actions.outcome = new Promise<void>(resolve => (finish = () => resolve()));
    click(view, 'Stop');
    await settle();
    expect(actions.calls).toEqual([['c', { action: 'stop' }]]);
    expect(text(view.node.querySelector('.jp-GpuMagics-busy'))).toBe(
      'Stopping\u2026 (waits for the kernel if it is busy)'
    );
    expect(buttons(view).every(b => b.disabled)).toBe(true);
    finish();
    await settle();
    expect(view.node.querySelector('.jp-GpuMagics-busy')).toBeNull();
    expect(buttons(view).some(b => b.disabled)).toBe(false);
  });

  it('does nothing when a Stop or Restart is not confirmed, or a Scale is cancelled', async () => {
    const { view, actions } = setUp([cluster()]);
    actions.confirm = false;
    actions.workers = null;
    click(view, 'Stop');
    click(view, 'Restart');
    click(view, 'Scale');
    await settle();
    expect(actions.calls).toEqual([]);
    expect(view.node.querySelector('.jp-GpuMagics-busy')).toBeNull();
  });

  it('restarts and scales to the number asked for', async () => {
    const { view, actions } = setUp([cluster({ name: 'c' })]);
    click(view, 'Restart');
    await settle();
    click(view, 'Scale');
    await settle();
    expect(actions.calls).toEqual([
      ['c', { action: 'restart' }],
      ['c', { action: 'scale', workers: 3 }]
    ]);
  });

  it('parks a running cluster and resumes a parked one from one place on the card', async () => {
    const { view, actions } = setUp([cluster({ name: 'c', kind: 'gpu' })]);
    const row = (): Element => view.node.querySelector('.jp-GpuMagics-parkButtons') as Element;
    expect(Array.from(row().querySelectorAll('button'), text)).toEqual(['Park']);
    expect(row().querySelector('button')?.getAttribute('title')).toContain('Runs %gpucluster park in its kernel');
    click(view, 'Park');
    await settle();
    expect(actions.calls).toEqual([['c', { action: 'park' }]]);
    const parked = cluster({ name: 'c', kind: 'gpu', parked: { since: 880, bytes: 2 ** 30, workers: 2 } });
    view.render(state([parked]), 1000);
    expect(Array.from(row().querySelectorAll('button'), text)).toEqual(['Resume']);
    click(view, 'Resume');
    await settle();
    expect(actions.calls[1]).toEqual(['c', { action: 'resume' }]);
    view.render(state([cluster({ name: 'cpu', kind: 'cpu' })]), 1000); // its workers hold no GPU: no Park
    expect(view.node.querySelector('.jp-GpuMagics-parkButtons')).toBeNull();
  });

  it('shows what the kernel said for an action on the row, once the action ended, for a minute', async () => {
    const { view, actions } = setUp([cluster({ name: 'c', kind: 'gpu' })]);
    const line = "%gpucluster: parked 2 workers of 'c': 9.0 GiB of GPU memory back to the server in 1.2 s";
    let finish: (said: string[]) => void = () => undefined;
    actions.outcome = new Promise<string[]>(resolve => (finish = resolve));
    click(view, 'Park');
    await settle();
    expect(view.node.querySelector('.jp-GpuMagics-said')).toBeNull(); // while it parks: "Parking…"
    finish([line]);
    await settle();
    expect(text(view.node.querySelector('[data-cluster="c"] .jp-GpuMagics-said'))).toBe(
      "parked 2 workers of 'c': 9.0 GiB of GPU memory back to the server in 1.2 s"
    );
    view.render(state([cluster({ name: 'c', kind: 'gpu' })]), Date.now() / 1000 + 61);
    expect(view.node.querySelector('.jp-GpuMagics-said')).toBeNull();
    actions.outcome = Promise.resolve([]);
    click(view, 'Park');
    await settle();
    expect(view.node.querySelector('.jp-GpuMagics-said')).toBeNull(); // the next action's own (none) replaces it
  });

  it('shows the kernel\u2019s error on the row until the next action', async () => {
    const { view, actions } = setUp([cluster({ name: 'c' })]);
    actions.outcome = Promise.reject(new Error('UsageError: no cluster'));
    click(view, 'Scale');
    await settle();
    expect(text(view.node.querySelector('[data-cluster="c"] .jp-GpuMagics-error'))).toBe('UsageError: no cluster');
    actions.outcome = Promise.resolve();
    click(view, 'Stop');
    await settle();
    expect(view.node.querySelector('.jp-GpuMagics-error')).toBeNull();
  });

  it('shows each SLURM job with its state, node, reason and GPUs, and what the cluster adapts between', () => {
    const slurm = cluster({
      name: 's',
      kind: 'slurm',
      manager: 'SLURM jobs',
      workers: 2,
      adaptive: [0, 4],
      jobs: [
        {
          job_id: '12',
          state: 'running',
          node: 'gpu-1',
          reason: null,
          workers: ['s-0-0', 's-0-1'],
          gpus: ['H100 (gpu-1 \u00b7 GPU 0)', 'H100 (gpu-1 \u00b7 GPU 1)']
        },
        { job_id: '13', state: 'pending', node: null, reason: 'Resources', workers: [], gpus: [] }
      ]
    });
    const { view } = setUp([slurm]);
    const row = view.node.querySelector('[data-cluster="s"]') as HTMLElement;
    const kind = text(row.querySelector('.jp-GpuMagics-clusterKind'));
    expect(kind).toBe('SLURM \u00b7 2 workers \u00b7 2 jobs (1 pending)');
    expect(text(row.querySelector('.jp-GpuMagics-adaptive'))).toBe('adapts between 0 and 4 workers');
    expect(Array.from(row.querySelectorAll('.jp-GpuMagics-job')).map(text)).toEqual([
      'job 12 running on gpu-1 \u00b7 GPUs H100 (gpu-1 \u00b7 GPU 0), H100 (gpu-1 \u00b7 GPU 1)',
      'job 13 pending (Resources)'
    ]);
  });

  it('adapts between the bounds asked for, and not when the dialog is cancelled', async () => {
    const { view, actions } = setUp([cluster({ name: 'c', kind: 'adopted', manager: 'KubeCluster' })]);
    expect(text(view.node.querySelector('.jp-GpuMagics-clusterKind'))).toBe('KubeCluster \u00b7 2 workers');
    click(view, 'Adapt');
    await settle();
    actions.bounds = null;
    click(view, 'Adapt');
    await settle();
    expect(actions.calls).toEqual([['c', { action: 'adapt', minimum: 0, maximum: 4 }]]);
  });
});
