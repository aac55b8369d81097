/** A cluster's workers with their GPUs, live: a heading per host, a line per GPU (or one for a worker without). */
import { gpuShortLabel, memberNames, membersByHost, memberWithoutGpus } from '../../model/clusters';
import { el } from '../dom';
import { formatBytes, formatBytesPair, formatPercent } from '../../format';
import { othersText, splitText } from '../../model/panelModel';
import type { IClusterMember, IMemberGpu } from '../../types';
import { barFill, splitView } from '../controls';

export function membersView(members: IClusterMember[]): HTMLElement {
  const view = el('div', { class: 'jp-GpuMagics-members' });
  const names = memberNames(members);
  for (const group of membersByHost(members)) {
    view.append(
      el('div', { class: 'jp-GpuMagics-host', 'data-host': group.host, title: `host ${group.host}` }, group.host),
      // one worker on a host: its GPUs need no worker name (it is in each line's tooltip)
      ...group.members.flatMap(member =>
        memberLines(
          member,
          names.get(member) ?? member.name,
          group.members.filter(m => m.role !== 'kernel').length > 1 || member.role === 'kernel'
        )
      )
    );
  }
  return view;
}

function memberLines(member: IClusterMember, name: string, named: boolean): HTMLElement[] {
  if (member.gpus.length === 0) {
    return [
      el(
        'div',
        {
          class: 'jp-GpuMagics-memberGpu jp-GpuMagics-memberIdle',
          'data-member': member.name,
          title: name === member.name ? member.address : `worker ${member.name} (${member.address})`
        },
        el('span', { class: 'jp-GpuMagics-memberName' }, name),
        el('span', { class: 'jp-GpuMagics-memberWait' }, memberWithoutGpus(member))
      )
    ];
  }
  return member.gpus.flatMap(gpu => [memberGpuLine(member, named ? name : null, gpu), ...memberGpuNotes(gpu)]);
}

/** Under a GPU's line: others' work on it (marked), and what the process says it holds there. */
function memberGpuNotes(gpu: IMemberGpu): HTMLElement[] {
  const notes: HTMLElement[] = [];
  if (gpu.others) {
    const text = othersText(gpu.others);
    notes.push(
      el(
        'div',
        { class: 'jp-GpuMagics-memberNote jp-GpuMagics-memberOthers', title: `Busy with work that is not this cluster\u2019s: ${text}` },
        el('span', { class: 'jp-GpuMagics-others' }, 'others'),
        ` ${text}`
      )
    );
  }
  const split = splitText(gpu.array_memory, gpu.cached_memory, gpu.context_memory);
  const view = gpu.error
    ? null
    : splitView(gpu.array_memory, gpu.cached_memory, gpu.context_memory, `${split}: what the process holds`);
  if (view) {
    notes.push(view);
  }
  return notes;
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
  if (member.role === 'kernel' && gpu.error === null && gpu.memory_used === null) {
    // the kernel says only what it holds (under this line); the GPU's own figures are on its worker's line
    line.classList.add('jp-GpuMagics-memberOwn');
    return line;
  }
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
