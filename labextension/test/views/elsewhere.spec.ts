/** @jest-environment jsdom */
import type { ICluster, IClusterElsewhere } from '../../src/types';
import { ClustersView, IClusterActions } from '../../src/views/sections/clusters';
import { MemoryView } from '../../src/views/sections/memory';
import { cluster, elsewhere, holder } from '../fixtures';

const actions: IClusterActions = {
  cluster: () => Promise.resolve(),
  askWorkers: () => Promise.resolve(null),
  askAdapt: () => Promise.resolve(null),
  confirmStop: () => Promise.resolve(false),
  confirmRestart: () => Promise.resolve(false),
  openPath: () => undefined
};

function render(view: ClustersView, clusters: ICluster[], others: IClusterElsewhere[]): void {
  view.render({ clusters, clustersError: null, connection: { phase: 'open' }, clustersElsewhere: others }, 1000);
}

describe('the clusters of kernels this server does not run', () => {
  it('are folded under the server\u2019s own cards, with one summary line and where each kernel runs', () => {
    const view = new ClustersView(actions, () => undefined);
    render(view, [cluster({ name: 'mine' })], [elsewhere(), elsewhere({ name: 'two', kernel_id: 'feedbeef-1' })]);
    const cards = view.node.querySelectorAll('.jp-GpuMagics-cluster');
    expect(Array.from(cards).map(card => card.getAttribute('data-cluster'))).toEqual(['mine']);
    const fold = view.node.querySelector('details.jp-GpuMagics-elsewhere') as HTMLDetailsElement;
    expect(fold.open).toBe(false);
    expect(view.node.lastElementChild).toBe(fold); // below the server's own
    expect(fold.querySelector('summary')?.textContent).toBe('2 clusters of kernels this server does not run');
    const rows = Array.from(fold.querySelectorAll('.jp-GpuMagics-elsewhereCluster')).map(row => row.textContent);
    expect(rows[0]).toContain('a kernel with no server id, pid 4242 on gpu-node-2, connection file tmpqc6nlsg9.json');
    expect(rows[1]).toContain('kernel feedbeef, pid 4242');
  });

  it('stays open across renders once opened, and is gone when there are none', () => {
    const view = new ClustersView(actions, () => undefined);
    render(view, [], [elsewhere()]);
    const fold = view.node.querySelector('details') as HTMLDetailsElement;
    fold.open = true;
    fold.dispatchEvent(new Event('toggle'));
    render(view, [], [elsewhere()]);
    expect((view.node.querySelector('details') as HTMLDetailsElement).open).toBe(true);
    expect(view.node.querySelector('.jp-GpuMagics-empty')?.textContent).toContain(
      'No cluster of this server\u2019s notebooks.'
    );
    render(view, [], []);
    expect(view.node.querySelector('details')).toBeNull();
    expect(view.node.querySelector('.jp-GpuMagics-empty')?.textContent).toContain('No cluster running.');
  });
});

describe('the memory list', () => {
  it('folds the processes of kernels this server does not run under its own', () => {
    const view = new MemoryView();
    const other = holder({ pid: 9, kernel_id: null, used_memory: 2 ** 30 });
    view.render({ memoryByOwner: () => [], unreadableGpus: [], holdersElsewhere: [other] });
    expect(view.node.querySelector('.jp-GpuMagics-empty')?.textContent).toBe(
      'No process of this server\u2019s notebooks holds GPU memory.'
    );
    const fold = view.node.querySelector('details.jp-GpuMagics-elsewhere') as HTMLDetailsElement;
    expect(fold.open).toBe(false);
    expect(fold.querySelector('summary')?.textContent).toBe(
      '1 process of a kernel this server does not run holds 1.0 GiB'
    );
    view.render({ memoryByOwner: () => [], unreadableGpus: [], holdersElsewhere: [] });
    expect(view.node.querySelector('details')).toBeNull();
    expect(view.node.querySelector('.jp-GpuMagics-empty')?.textContent).toBe('No process holds GPU memory.');
  });
});
