/** @jest-environment jsdom */
import './jsdomShim';

import { GpuPanelModel, gpuTime } from '../src/model/panelModel';
import { gpuTimeLine } from '../src/views/sections/gpuCards';
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

describe('a GPU\u2019s time by notebook', () => {
  const mine = (pid: number, util: number | null, path = 'train.ipynb') =>
    holder({ pid, gpu: 0, path, role: pid === 9 ? 'other' : 'kernel', sm_util: util });

  it('adds up each notebook\u2019s processes and names the rest others, busiest first', () => {
    const time = gpuTime([mine(1, 60), mine(2, 25), mine(3, 2, 'b.ipynb'), mine(9, 12)]);
    expect(time).toEqual({
      measured: true,
      shares: [
        { owner: 'train.ipynb', percent: 85 },
        { owner: 'others', percent: 12 },
        { owner: 'b.ipynb', percent: 2 }
      ]
    });
    const line = gpuTimeLine(0, time);
    expect(line.textContent).toBe('Time: train.ipynb 85% \u00b7 others 12% \u00b7 b.ipynb 2%');
    expect(line.dataset.measured).toBe('true');
  });

  it('says not measured where NVML gives no process a figure, never 0', () => {
    const time = gpuTime([mine(1, null), mine(9, null)]);
    expect(time.measured).toBe(false);
    const line = gpuTimeLine(1, time);
    expect(line.textContent).toBe('Time by notebook: not measured');
    expect(line.title).toContain('a MIG slice, a vGPU');
  });

  it('says not measured where a process of the user\u2019s is not under its pid in NVML\u2019s list (a container)', () => {
    const mapped = mine(9, 80);
    const unmapped = holder({ pid: 1, gpu: 0, path: 'train.ipynb', source: 'self-report', sm_util: null });
    expect(gpuTime([mapped, unmapped])).toEqual({ measured: false, shares: [] });
  });

  it('says when nobody ran lately', () => {
    expect(gpuTimeLine(0, gpuTime([mine(1, 0)])).textContent).toBe('Time: no process ran lately');
    expect(gpuTimeLine(0, gpuTime([])).textContent).toBe('Time: no process ran lately');
  });

  it('is on the card of this server\u2019s GPU once its processes are read', () => {
    const model = new GpuPanelModel();
    expect(model.gpuTimeOn(0)).toBeNull();
    model.setHolders({
      time: 1,
      status: null,
      processes: [mine(1, 40)],
      unreadable_gpus: [],
      others: [],
      reporting_kernels: []
    });
    expect(model.gpuTimeOn(0)?.shares).toEqual([{ owner: 'train.ipynb', percent: 40 }]);
  });
});
