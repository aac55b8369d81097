/** The GPU cards: per GPU its name, four metrics, a memory bar and a chart of utilization and memory over time. */
import { chartSpanLabel, sparklinePath } from '../chart';
import { el, svg } from '../dom';
import {
  formatBytes,
  formatBytesPair,
  formatNumber,
  formatNumberPair,
  formatPercent,
  formatRate,
  memoryPercent
} from '../../format';
import { othersText } from '../../model/panelModel';
import type { IGpuTime, IGpuView } from '../../model/panelModel';
import type { IGpuOtherUse, IGpuReading } from '../../types';
import { barFill } from '../controls';

const CHART_W = 240;
const CHART_H = 40;

/** What the cards show (the panel's model has it). */
export interface ICardsState {
  /** The server samples and has no GPU to show: a notice takes the cards' place. */
  readonly noGpu: boolean;
  readonly unavailableReason: string | null;
  readonly cpuClusterCommand: string;
  readonly gpus: IGpuView[];
  /** What others (not the user's notebooks) hold on this server's GPU `index`, or `null`. */
  othersOn?(index: number): IGpuOtherUse | null;
  /** Who used this server's GPU `index` lately, or `null` until its processes are read. */
  gpuTimeOn?(index: number): IGpuTime | null;
}

export class GpuCardsView {
  readonly node = el('div', { class: 'jp-GpuMagics-cards' });

  render(state: ICardsState): void {
    if (state.noGpu) {
      this.node.replaceChildren(noGpuNotice(state.unavailableReason, state.cpuClusterCommand));
      return;
    }
    this.node.replaceChildren(
      ...state.gpus.map(view =>
        view.reading.host
          ? gpuCard(view)
          : gpuCard(view, state.othersOn?.(view.reading.index) ?? null, state.gpuTimeOn?.(view.reading.index) ?? null)
      )
    );
  }
}

/**
 * One GPU's card; a GPU that cannot be read shows its error instead of metrics. `others`: what processes that are
 * not the user's notebooks hold on it, marked in the title (its height stays, whether marked or not).
 */
export function gpuCard(view: IGpuView, others: IGpuOtherUse | null = null, time: IGpuTime | null = null): HTMLElement {
  const r = view.reading;
  const card = el(
    'div',
    { class: 'jp-GpuMagics-card', 'data-gpu': String(r.index) },
    el(
      'div',
      { class: 'jp-GpuMagics-cardTitle' },
      el('span', { class: 'jp-GpuMagics-gpuIndex' }, cardLabel(r)),
      el('span', { class: 'jp-GpuMagics-gpuName', title: r.uuid }, r.name),
      others ? othersBadge(others) : null
    )
  );
  if (others) {
    card.dataset.others = 'true';
  }
  if (r.error) {
    card.append(el('div', { class: 'jp-GpuMagics-error' }, r.error));
    return card;
  }
  card.append(
    el(
      'div',
      { class: 'jp-GpuMagics-metrics' },
      metric('Util', formatPercent(r.gpu_util), 'util', 'GPU utilization'),
      metric('Power', formatNumberPair(r.power, r.power_limit, 'W'), 'power', 'Power draw / limit'),
      metric('Temp', formatNumber(r.temperature, '\u00b0C'), 'temperature', 'GPU temperature'),
      metric('Clock', formatNumber(r.sm_clock, 'MHz'), 'clock', 'SM clock'),
      el(
        'div',
        { class: 'jp-GpuMagics-links' },
        linkMetric('PCIe', r.pcie_rx, r.pcie_tx, 'pcie'),
        linkMetric('NVLink', r.nvlink_rx, r.nvlink_tx, 'nvlink')
      )
    ),
    memoryBar(r.memory_used, r.memory_total, others),
    ...(time ? [gpuTimeLine(r.index, time)] : []),
    chart(view)
  );
  return card;
}

/**
 * "Time: train.ipynb 85% · others 12%": who used the GPU lately (NVML's per-process samples, a notebook's kernel,
 * workers and ranks added up); "Time by notebook: not measured" where NVML cannot say (a MIG slice, a vGPU, or a
 * container whose processes it cannot map), never 0.
 */
export function gpuTimeLine(index: number, time: IGpuTime): HTMLElement {
  const shares = time.shares.filter(share => share.percent >= 0.5);
  const listed = shares.map(share => `${share.owner} ${Math.round(share.percent)}%`);
  const text = !time.measured
    ? 'Time by notebook: not measured'
    : listed.length
      ? `Time: ${listed.join(' \u00b7 ')}`
      : 'Time: no process ran lately';
  const title = !time.measured
    ? `NVML gives no per-process samples of GPU ${index} here (a MIG slice, a vGPU, or a container whose ` +
      'processes it cannot map): whose work keeps it busy is not measured'
    : `Share of GPU ${index}\u2019s time each notebook\u2019s processes (kernel, workers, ranks) ran lately, ` +
      `from NVML\u2019s samples${listed.length ? `: ${listed.join(', ')}` : ''}`;
  return el(
    'div',
    { class: 'jp-GpuMagics-gpuTime', 'data-measured': String(time.measured), title },
    text
  );
}

/** "others · 40 GiB": this GPU is busy with work that is not the user's notebooks'; the tooltip says whose. */
export function othersBadge(use: IGpuOtherUse): HTMLElement {
  return el(
    'span',
    {
      class: 'jp-GpuMagics-others',
      title: `Busy with work that is not your notebooks\u2019: ${othersText(use)}`,
      role: 'note'
    },
    'others'
  );
}

/** The place of the cards when the server has no GPU to sample: what to do next, not an error. */
export function noGpuNotice(reason: string | null, cpuCluster: string): HTMLElement {
  return el(
    'div',
    { class: 'jp-GpuMagics-noGpu' },
    el('div', { class: 'jp-GpuMagics-noGpuTitle' }, 'No GPU on this server'),
    el(
      'div',
      {},
      'The CPU backends work without one: ',
      el('code', {}, '%%gpurun cpu-threads'),
      ' runs a cell on every core, ',
      el('code', {}, cpuCluster),
      ' starts a CPU cluster.'
    ),
    reason ? el('div', { class: 'jp-GpuMagics-note' }, reason) : null
  );
}

/** "GPU 0", or "127.0.0.2 \u00b7 GPU 1" for a GPU read on another host. */
export function cardLabel(reading: IGpuReading): string {
  return reading.host ? `${reading.host} \u00b7 GPU ${reading.nvml_index ?? reading.index}` : `GPU ${reading.index}`;
}

/**
 * A link's throughput, both ways added ("1.2 GiB/s"); the tooltip splits it (received, sent). NVML reads the links
 * every few seconds; a link it cannot read (no NVLink, or not supported) shows a dash.
 */
export function linkMetric(label: string, rx: number | null, tx: number | null, name: string): HTMLElement {
  const known = rx !== null || tx !== null;
  const value = known ? formatRate((rx ?? 0) + (tx ?? 0)) : '\u2013';
  const title = known
    ? `${label} throughput: received ${formatRate(rx)}, sent ${formatRate(tx)} (read every few seconds)`
    : `${label}: not read on this GPU (none, or NVML does not support it here)`;
  return metric(label, value, name, title);
}

function metric(label: string, value: string, name: string, title: string): HTMLElement {
  return el(
    'div',
    { class: 'jp-GpuMagics-metric', 'data-metric': name, title },
    el('span', { class: 'jp-GpuMagics-label' }, label),
    el('span', { class: 'jp-GpuMagics-value' }, value)
  );
}

/**
 * Memory: used / total, and a bar of the share in use (0 to the total); the part that others hold (`others`) is
 * the bar's last segment, in the warning colour.
 */
function memoryBar(used: number | null, total: number | null, others: IGpuOtherUse | null): HTMLElement {
  const percent = memoryPercent(used, total);
  const theirs = others && used !== null ? memoryPercent(Math.min(others.bytes, used), total) : null;
  const bar = el('div', { class: 'jp-GpuMagics-bar' }, barFill(percent === null ? null : percent - (theirs ?? 0)));
  let title = `GPU memory in use: ${formatPercent(percent)} of ${formatBytes(total)}`;
  if (others && theirs !== null) {
    const segment = barFill(theirs);
    segment.classList.add('jp-GpuMagics-barOthers');
    bar.append(segment);
    title += `; ${formatBytes(others.bytes)} of it others\u2019 (${othersText(others)})`;
  }
  return el(
    'div',
    { class: 'jp-GpuMagics-memoryBar', 'data-metric': 'memory', title },
    el('span', { class: 'jp-GpuMagics-label' }, 'Memory'),
    bar,
    el('span', { class: 'jp-GpuMagics-value' }, formatBytesPair(used, total))
  );
}

/** Utilization and memory (both 0-100%) over the samples kept, with a scale, a legend and the time span. */
function chart(view: IGpuView): HTMLElement {
  const mid = (CHART_H / 2).toFixed(1);
  const plot = svg(
    'svg',
    {
      class: 'jp-GpuMagics-chart',
      viewBox: `0 0 ${CHART_W} ${CHART_H}`,
      preserveAspectRatio: 'none',
      role: 'img',
      'aria-label': 'utilization and memory in use over time, 0 to 100%'
    },
    svg('path', { class: 'jp-GpuMagics-grid', d: `M0,${mid} L${CHART_W},${mid}` }),
    svg('path', { class: 'jp-GpuMagics-lineMemory', d: sparklinePath(view.memory.values(), CHART_W, CHART_H) }),
    svg('path', { class: 'jp-GpuMagics-lineUtil', d: sparklinePath(view.util.values(), CHART_W, CHART_H) })
  );
  return el(
    'div',
    { class: 'jp-GpuMagics-chartBox' },
    el(
      'div',
      { class: 'jp-GpuMagics-plot' },
      plot,
      el('span', { class: 'jp-GpuMagics-axis jp-GpuMagics-axisTop' }, '100%'),
      el('span', { class: 'jp-GpuMagics-axis jp-GpuMagics-axisBottom' }, '0%')
    ),
    el(
      'div',
      { class: 'jp-GpuMagics-legend' },
      el('span', { class: 'jp-GpuMagics-key jp-GpuMagics-keyUtil' }, 'util'),
      el('span', { class: 'jp-GpuMagics-key jp-GpuMagics-keyMemory' }, 'memory'),
      el('span', { class: 'jp-GpuMagics-span' }, chartSpanLabel(view.times.values()))
    )
  );
}
