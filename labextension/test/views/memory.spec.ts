/** @jest-environment jsdom */
import { GpuPanelModel } from '../../src/model/panelModel';
import { MemoryView, gpuList } from '../../src/views/sections/memory';
import type { IHolder } from '../../src/types';
import { holder, holder as holderFixture, reading, snapshot } from '../fixtures';

function rows(view: MemoryView): string[][] {
  return Array.from(view.node.querySelectorAll('.jp-GpuMagics-ownerTitle, .jp-GpuMagics-holder'), row =>
    Array.from(row.children, part => part.textContent ?? '')
  );
}

describe('MemoryView', () => {
  it('says so when no process holds GPU memory', () => {
    const view = new MemoryView();
    const model = new GpuPanelModel();
    model.setHolders({ time: 1, status: null, processes: [], unreadable_gpus: [], others: [], reporting_kernels: [] });
    view.render(model);
    expect(view.node.textContent).toBe('No process holds GPU memory.');
  });

  it('lists notebooks largest first; a holder line shows its bytes only where its notebook has several', () => {
    const model = new GpuPanelModel();
    model.setHolders({
      time: 1,
      status: null,
      unreadable_gpus: [],
      others: [],
      reporting_kernels: [],
      processes: [
        holder({ pid: 1, path: 'small.ipynb', used_memory: 2 ** 30 }),
        holder({ pid: 2, path: 'big.ipynb', used_memory: 2 ** 32, role: 'kernel' }),
        holder({
          pid: 3,
          path: 'big.ipynb',
          gpu: 1,
          gpu_label: '127.0.0.2 \u00b7 GPU 1',
          used_memory: 2 ** 31,
          role: 'worker',
          cluster: 'e2e',
          worker: 'tcp://127.0.0.2:4000',
          source: 'self-report'
        })
      ]
    });
    const view = new MemoryView();
    view.render(model);
    expect(rows(view)).toEqual([
      ['big.ipynb', '6.0 GiB'],
      ['GPU 0 \u00b7 kernel', '4.0 GiB', 'NVML'],
      ['127.0.0.2 \u00b7 GPU 1 \u00b7 e2e worker tcp://127.0.0.2:4000', '2.0 GiB', 'self-report'],
      ['small.ipynb', '1.0 GiB'],
      ['GPU 0 \u00b7 kernel', '', 'NVML']
    ]);
    const lines = Array.from(view.node.querySelectorAll<HTMLElement>('.jp-GpuMagics-holder'));
    expect(lines.map(line => line.dataset.source)).toEqual(['nvml', 'self-report', 'nvml']);
    expect(lines[1]?.querySelector('.jp-GpuMagics-tag')?.getAttribute('title')).toBe(
      'Reported by the process itself (NVML cannot see it from here)'
    );
    expect(view.node.querySelector('.jp-GpuMagics-ownerName')?.getAttribute('title')).toBe('big.ipynb');
  });

  it('names the GPUs whose processes cannot be read', () => {
    const view = new MemoryView();
    view.render({ memoryByOwner: () => [], unreadableGpus: [0, 2] });
    expect(Array.from(view.node.children, child => child.textContent)).toEqual([
      'No process holds GPU memory.',
      'Processes on GPU 0, 2 cannot be read (no permission or not supported).'
    ]);
  });
});

describe('MemoryView figures of different ages', () => {
  const holder = (used: number): IHolder => holderFixture({ gpu: 0, used_memory: used, host: null });

  it('says it is still reading before the first processes reply, not that nothing holds memory', () => {
    const view = new MemoryView();
    view.render({ memoryByOwner: () => [], unreadableGpus: [], holdersRead: false });
    expect(view.node.textContent).toBe('Reading the GPUs\u2019 processes\u2026');
    view.render({ memoryByOwner: () => [], unreadableGpus: [], holdersRead: true });
    expect(view.node.textContent).toBe('No process holds GPU memory.');
  });

  it('marks processes whose memory (read every few seconds) is above what the GPU uses now', () => {
    const model = new GpuPanelModel();
    model.applySnapshot(snapshot(1, [reading(0, { memory_used: 3 * 2 ** 30 })]));
    const reply = { time: 1, status: null, unreadable_gpus: [], others: [], reporting_kernels: [] };
    model.setHolders({ ...reply, processes: [holder(17 * 2 ** 30)] });
    expect(model.holdersAboveGpuUse()).toEqual([0]);
    const view = new MemoryView();
    view.render(model);
    const note = view.node.querySelector('[data-note="holders-age"]');
    expect(note?.textContent).toBe(
      'Processes are read every few seconds, the cards every second: GPU 0 uses less now than listed here.'
    );
    model.setHolders({ ...reply, processes: [holder(2 * 2 ** 30)] });
    expect(model.holdersAboveGpuUse()).toEqual([]);
    view.render(model);
    expect(view.node.querySelector('[data-note="holders-age"]')).toBeNull();
  });

  it('says one GPU uses less, several use less', () => {
    expect(gpuList([0])).toBe('GPU 0 uses less');
    expect(gpuList([0, 1])).toBe('GPU 0 and GPU 1 use less');
    expect(gpuList([0, 1, 3])).toBe('GPU 0, GPU 1 and GPU 3 use less');
  });
});
