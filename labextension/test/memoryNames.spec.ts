/** @jest-environment jsdom */
import './jsdomShim';

import { GpuPanelModel } from '../src/model/panelModel';
import { MemoryView, namesSummary } from '../src/views/sections/memory';
import { holder } from './fixtures';

const NAMES = [
  { name: 'embeddings', what: 'CuPy array 65536 x 4096 float32', bytes: 2 ** 30, give_back: 'del embeddings' },
  { name: 'Out[3]', what: 'CuPy array 4096 x 4096 float64', bytes: 2 ** 27, give_back: '%reset -f out' }
];

function viewWith(names = NAMES): { view: MemoryView; model: GpuPanelModel } {
  const model = new GpuPanelModel();
  model.setHolders({
    time: 1,
    status: null,
    processes: [holder({ used_memory: 2 ** 31, top_names: names })],
    unreadable_gpus: [],
    others: [],
    reporting_kernels: []
  });
  const view = new MemoryView();
  view.render(model);
  return { view, model };
}

describe('the names that hold a kernel\u2019s memory', () => {
  it('fold under its holder line, biggest first, with their sizes and how to give each back', () => {
    const { view } = viewWith();
    const fold = view.node.querySelector('details.jp-GpuMagics-names') as HTMLDetailsElement;
    expect(fold).not.toBeNull();
    expect(fold.open).toBe(false);
    expect(fold.querySelector('summary')?.textContent).toBe('held by embeddings and 1 more name');
    const rows = Array.from(fold.querySelectorAll('.jp-GpuMagics-name'));
    expect(rows.map(row => row.textContent)).toEqual(['embeddings1.0 GiB', 'Out[3]128 MiB']);
    expect(rows[1]?.getAttribute('title')).toBe('Out[3]: CuPy array 4096 x 4096 float64; %reset -f out gives it back');
  });

  it('stay open across the list\u2019s renders once opened', () => {
    const { view, model } = viewWith();
    const fold = view.node.querySelector('details.jp-GpuMagics-names') as HTMLDetailsElement;
    fold.open = true;
    fold.dispatchEvent(new Event('toggle'));
    view.render(model);
    expect((view.node.querySelector('details.jp-GpuMagics-names') as HTMLDetailsElement).open).toBe(true);
  });

  it('are not shown where the record has none', () => {
    expect(viewWith([]).view.node.querySelector('.jp-GpuMagics-names')).toBeNull();
    expect(namesSummary(NAMES.slice(0, 1))).toBe('held by embeddings');
  });
});
