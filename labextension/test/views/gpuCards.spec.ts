/** @jest-environment jsdom */
import { GpuPanelModel } from '../../src/model/panelModel';
import { cardLabel, GpuCardsView, gpuCard } from '../../src/views/sections/gpuCards';
import { reading, snapshot } from '../fixtures';

function text(node: Element | null | undefined): string {
  return node?.textContent ?? '';
}

describe('GpuCardsView', () => {
  it('renders a card per GPU: label, name, four metrics, memory bar and chart', () => {
    const model = new GpuPanelModel();
    model.applySnapshot(snapshot(1, [reading(0), reading(1, { gpu_util: 80, memory_used: 50 })]));
    model.applySnapshot(snapshot(31, [reading(0, { gpu_util: 70 }), reading(1, { gpu_util: 90, memory_used: 50 })]));
    const view = new GpuCardsView();
    view.render(model);

    const cards = view.node.querySelectorAll('.jp-GpuMagics-card');
    expect(Array.from(cards, card => card.getAttribute('data-gpu'))).toEqual(['0', '1']);
    const card = cards[1] as HTMLElement;
    expect(text(card.querySelector('.jp-GpuMagics-gpuIndex'))).toBe('GPU 1');
    const name = card.querySelector('.jp-GpuMagics-gpuName');
    expect(text(name)).toBe('NVIDIA H200');
    expect(name?.getAttribute('title')).toBe('GPU-1');
    const metrics = Array.from(card.querySelectorAll('.jp-GpuMagics-metric'), m => [
      m.getAttribute('data-metric'),
      text(m.querySelector('.jp-GpuMagics-label')),
      text(m.querySelector('.jp-GpuMagics-value'))
    ]);
    expect(metrics).toEqual([
      ['util', 'Util', '90%'],
      ['power', 'Power', '100/700 W'],
      ['temperature', 'Temp', '40 \u00b0C'],
      ['clock', 'Clock', '1500 MHz'],
      ['pcie', 'PCIe', '\u2013'], // the fixture's links are not read
      ['nvlink', 'NVLink', '\u2013']
    ]);
    const memory = card.querySelector('.jp-GpuMagics-memoryBar') as HTMLElement;
    expect(memory.getAttribute('title')).toBe('GPU memory in use: 50% of 100 B');
    expect((memory.querySelector('.jp-GpuMagics-barFill') as HTMLElement).style.width).toBe('50.0%');
    expect(text(memory.querySelector('.jp-GpuMagics-value'))).toBe('50/100 B');
    // the chart: utilization 80 -> 90 and memory 50% over the two samples, the span they cover
    expect(card.querySelector('.jp-GpuMagics-lineUtil')?.getAttribute('d')).toBe('M0.0,8.0 L240.0,4.0');
    expect(card.querySelector('.jp-GpuMagics-lineMemory')?.getAttribute('d')).toBe('M0.0,20.0 L240.0,20.0');
    expect(text(card.querySelector('.jp-GpuMagics-span'))).toBe('last 30 s');
    expect(text(card.querySelector('.jp-GpuMagics-axisTop'))).toBe('100%');
  });

  it('shows an unreadable GPU with its error and no metrics', () => {
    const model = new GpuPanelModel();
    model.applySnapshot(snapshot(1, [reading(0, { error: 'GPU is lost' })]));
    const view = new GpuCardsView();
    view.render(model);
    const card = view.node.querySelector('.jp-GpuMagics-card') as HTMLElement;
    expect(text(card.querySelector('.jp-GpuMagics-error'))).toBe('GPU is lost');
    expect(card.querySelector('.jp-GpuMagics-metrics')).toBeNull();
    expect(card.querySelector('.jp-GpuMagics-chart')).toBeNull();
  });

  it('replaces its cards on each render, following the GPUs there are', () => {
    const model = new GpuPanelModel();
    const view = new GpuCardsView();
    model.applySnapshot(snapshot(1, [reading(0), reading(1)]));
    view.render(model);
    model.applySnapshot(snapshot(2, [reading(1)]));
    view.render(model);
    expect(Array.from(view.node.children, c => c.getAttribute('data-gpu'))).toEqual(['1']);
  });

  it('says what to do next where the server has no GPU, with the reason', () => {
    const view = new GpuCardsView();
    const noGpu = { noGpu: true, gpus: [], cpuClusterCommand: '%gpucluster --cpu-workers 2' };
    view.render({ ...noGpu, unavailableReason: 'no NVIDIA driver is installed here' });
    expect(view.node.querySelector('.jp-GpuMagics-card')).toBeNull();
    expect(text(view.node.querySelector('.jp-GpuMagics-noGpuTitle'))).toBe('No GPU on this server');
    // the server's command (its N is at most its cores, as in the notebooks' hints)
    expect(Array.from(view.node.querySelectorAll('code'), text)).toEqual([
      '%%gpurun cpu-threads',
      '%gpucluster --cpu-workers 2'
    ]);
    expect(text(view.node.querySelector('.jp-GpuMagics-note'))).toBe('no NVIDIA driver is installed here');
    view.render({ ...noGpu, unavailableReason: null });
    expect(view.node.querySelector('.jp-GpuMagics-note')).toBeNull();
  });
});

describe('cardLabel', () => {
  it('names a local GPU by its index and a remote one by host and NVML index', () => {
    expect(cardLabel(reading(3))).toBe('GPU 3');
    expect(cardLabel(reading(3, { host: '127.0.0.2', nvml_index: 1 }))).toBe('127.0.0.2 \u00b7 GPU 1');
    expect(cardLabel(reading(3, { host: '127.0.0.2', nvml_index: null }))).toBe('127.0.0.2 \u00b7 GPU 3');
  });
});

describe('linkMetric', () => {
  it('shows PCIe and NVLink throughput both ways, split in the tooltip, a dash where not read', () => {
    const model = new GpuPanelModel();
    model.applySnapshot(
      snapshot(1, [reading(0, { pcie_rx: 2 * 2 ** 30, pcie_tx: 2 ** 30, nvlink_rx: null, nvlink_tx: null })])
    );
    const card = gpuCard(model.gpus[0]!);
    const pcie = card.querySelector('[data-metric="pcie"]') as HTMLElement;
    expect(text(pcie.querySelector('.jp-GpuMagics-value'))).toBe('3.0 GiB/s');
    expect(pcie.title).toBe('PCIe throughput: received 2.0 GiB/s, sent 1.0 GiB/s (read every few seconds)');
    const nvlink = card.querySelector('[data-metric="nvlink"]') as HTMLElement;
    expect(text(nvlink.querySelector('.jp-GpuMagics-value'))).toBe('\u2013');
  });
});
