/** @jest-environment jsdom */
import './jsdomShim';

import { GpuPanelModel } from '../src/model/panelModel';
import { GpuPanel, IPanelActions } from '../src/panel';
import { cluster, holder, reading, snapshot } from './fixtures';

const actions: IPanelActions = {
  cluster: () => Promise.resolve(),
  askWorkers: () => Promise.resolve(null),
  askAdapt: () => Promise.resolve(null),
  confirmStop: () => Promise.resolve(false),
  confirmRestart: () => Promise.resolve(false),
  freeCached: () => Promise.resolve(),
  openPath: () => undefined,
  confirmEndLeftovers: () => Promise.resolve(false),
  endLeftovers: () => Promise.reject(new Error('not asked'))
};

function frame(): Promise<void> {
  return new Promise(resolve => requestAnimationFrame(() => resolve()));
}

describe('GpuPanel', () => {
  it('composes the status, the cards, the clusters and memory by notebook, in that order', () => {
    const panel = new GpuPanel(new GpuPanelModel(), actions);
    expect(panel.node.classList.contains('jp-GpuMagics-panel')).toBe(true);
    expect(Array.from(panel.node.children, child => child.className || child.tagName)).toEqual([
      'jp-GpuMagics-header',
      'jp-GpuMagics-banner',
      'jp-GpuMagics-cards',
      'H3',
      'jp-GpuMagics-clusters',
      'jp-GpuMagics-leftovers',
      'H3',
      'jp-GpuMagics-holders'
    ]);
    expect(Array.from(panel.node.querySelectorAll('h2, h3'), h => h.textContent)).toEqual([
      'GPUs',
      'Clusters',
      'GPU memory by notebook'
    ]);
    // rendered at once: the empty states, paused until shown
    expect(panel.node.querySelector('.jp-GpuMagics-status')?.textContent).toBe('Paused while hidden');
    expect(panel.node.querySelector('.jp-GpuMagics-clusters')?.textContent).toContain('No cluster running');
    expect(panel.node.querySelector('.jp-GpuMagics-holders')?.textContent).toBe('Reading the GPUs\u2019 processes\u2026'); // none read yet
    expect((panel.node.querySelector('.jp-GpuMagics-leftovers') as HTMLElement).hidden).toBe(true); // nothing left
    panel.dispose();
  });

  it('renders what the model says changed, once per frame', async () => {
    const model = new GpuPanelModel();
    const panel = new GpuPanel(model, actions);
    model.setConnection({ phase: 'open' });
    model.applySnapshot(snapshot(1, [reading(0), reading(1)]));
    model.setClusters([cluster({ name: 'one' })]);
    model.setHolders({ time: 1, status: null, processes: [holder()], unreadable_gpus: [], others: [], reporting_kernels: [] });
    expect(panel.node.querySelectorAll('.jp-GpuMagics-card')).toHaveLength(0);
    await frame();
    expect(panel.node.querySelector('.jp-GpuMagics-status')?.textContent).toBe('Live');
    expect(panel.node.querySelectorAll('.jp-GpuMagics-card')).toHaveLength(2);
    expect(panel.node.querySelector('[data-cluster="one"]')).not.toBeNull();
    expect(panel.node.querySelector('.jp-GpuMagics-ownerName')?.textContent).toBe('a.ipynb');
    // a cluster change leaves the cards as they are
    const cards = panel.node.querySelector('.jp-GpuMagics-card');
    model.setClusters([]);
    await frame();
    expect(panel.node.querySelector('.jp-GpuMagics-card')).toBe(cards);
    expect(panel.node.querySelector('[data-cluster="one"]')).toBeNull();
    panel.dispose();
  });

  it('asks to reconnect when Retry is pressed after a refusal', async () => {
    const model = new GpuPanelModel();
    const panel = new GpuPanel(model, actions);
    let retries = 0;
    panel.retryRequested.connect(() => retries++);
    model.setConnection({ phase: 'forbidden', error: 'refused' });
    await frame();
    (panel.node.querySelector('.jp-GpuMagics-retry') as HTMLButtonElement).click();
    expect(retries).toBe(1);
    panel.dispose();
  });

  it('stops listening to the model when disposed', async () => {
    const model = new GpuPanelModel();
    const panel = new GpuPanel(model, actions);
    panel.dispose();
    model.setClusters([cluster({ name: 'late' })]);
    await frame();
    expect(panel.node.querySelector('[data-cluster="late"]')).toBeNull();
  });
});
