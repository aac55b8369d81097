/** A cluster's workers with their GPUs, live: a heading per host, a line per GPU (or one for a worker without). */
import { gpuShortLabel, memberName, membersByHost, memberWithoutGpus } from '../clusters';
import { el } from '../dom';
import { formatBytes, formatBytesPair, formatPercent } from '../format';
import type { IClusterMember, IMemberGpu } from '../types';
import { barFill } from './controls';

export function membersView(members: IClusterMember[]): HTMLElement {
  const view = el('div', { class: 'jp-GpuMagics-members' });
  for (const group of membersByHost(members)) {
    view.append(
      el('div', { class: 'jp-GpuMagics-host', 'data-host': group.host, title: `host ${group.host}` }, group.host),
      // one worker on a host: its GPUs need no worker name (it is in each line's tooltip)
      ...group.members.flatMap(member =>
        memberLines(member, group.members.filter(m => m.role !== 'kernel').length > 1 || member.role === 'kernel')
      )
    );
  }
  return view;
}

function memberLines(member: IClusterMember, named: boolean): HTMLElement[] {
  const name = memberName(member);
  if (member.gpus.length === 0) {
    return [
      el(
        'div',
        { class: 'jp-GpuMagics-memberGpu jp-GpuMagics-memberIdle', 'data-member': member.name, title: member.address },
        el('span', { class: 'jp-GpuMagics-memberName' }, name),
        el('span', { class: 'jp-GpuMagics-memberWait' }, memberWithoutGpus(member))
      )
    ];
  }
  return member.gpus.map(gpu => memberGpuLine(member, named ? name : null, gpu));
}

function memberGpuLine(member: IClusterMember, name: string | null, gpu: IMemberGpu): HTMLElement {
  const title = [
    `${gpu.label} \u00b7 ${gpu.name}`,
    `${member.role === 'kernel' ? 'the kernel' : `worker ${member.name}`} (${member.address})`,
    gpu.process_memory !== null
      ? `it holds ${formatBytes(gpu.process_memory)}${gpu.process_memory_source ? ` (${gpu.process_memory_source})` : ''}`
      : ''
  ]
    .filter(Boolean)
    .join('\n');
  const line = el(
    'div',
    { class: 'jp-GpuMagics-memberGpu', 'data-member': member.name, 'data-gpu-label': gpu.label, title },
    el('span', { class: 'jp-GpuMagics-memberName' }, name ? `${gpuShortLabel(gpu)} \u00b7 ${name}` : gpuShortLabel(gpu))
  );
  if (gpu.error) {
    line.append(el('span', { class: 'jp-GpuMagics-unreadable', title: gpu.error }, 'unreadable'));
    return line;
  }
  line.append(
    miniBar(gpu.gpu_util, 'utilization'),
    el('span', { class: 'jp-GpuMagics-value', title: 'utilization' }, formatPercent(gpu.gpu_util)),
    el('span', { class: 'jp-GpuMagics-value', title: 'memory used / total' }, formatBytesPair(gpu.memory_used, gpu.memory_total))
  );
  return line;
}

function miniBar(percent: number | null, what: string): HTMLElement {
  return el('div', { class: 'jp-GpuMagics-bar jp-GpuMagics-miniBar', title: `${what}, 0\u2013100%` }, barFill(percent));
}
