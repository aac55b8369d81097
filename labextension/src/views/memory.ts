/** GPU memory by notebook: who holds what, largest first, a line per process with its GPU and where it is known from. */
import { el } from '../dom';
import { formatBytes } from '../format';
import { holderGpuLabel, holderRole, holderSourceTag, IOwnerTotal } from '../model';
import type { IHolder } from '../types';

/** What the list shows (the panel's model has it). */
export interface IMemoryState {
  /** GPU memory held per notebook (or kernel, or process), largest first. */
  memoryByOwner(): IOwnerTotal[];
  /** GPUs whose processes could not be read. */
  readonly unreadableGpus: number[];
}

export class MemoryView {
  readonly node = el('div', { class: 'jp-GpuMagics-holders' });

  render(state: IMemoryState): void {
    const owners = state.memoryByOwner();
    const children: HTMLElement[] = [];
    if (owners.length === 0) {
      children.push(el('div', { class: 'jp-GpuMagics-empty' }, 'No process holds GPU memory.'));
    } else {
      children.push(...owners.map(ownerView));
    }
    if (state.unreadableGpus.length) {
      children.push(
        el(
          'div',
          { class: 'jp-GpuMagics-note' },
          `Processes on GPU ${state.unreadableGpus.join(', ')} cannot be read (no permission or not supported).`
        )
      );
    }
    this.node.replaceChildren(...children);
  }
}

/** A notebook (or kernel, or process) with its total, and its holders below. */
function ownerView(owner: IOwnerTotal): HTMLElement {
  return el(
    'div',
    { class: 'jp-GpuMagics-owner' },
    el(
      'div',
      { class: 'jp-GpuMagics-ownerTitle' },
      el('span', { class: 'jp-GpuMagics-ownerName', title: owner.owner }, owner.owner),
      el('span', { class: 'jp-GpuMagics-num' }, formatBytes(owner.bytes))
    ),
    ...owner.holders.map(holder => holderLine(holder, owner.holders.length > 1))
  );
}

/** One holder: the GPU (with its host when remote), who, and where the row comes from. */
function holderLine(holder: IHolder, withBytes: boolean): HTMLElement {
  const tag = holderSourceTag(holder);
  return el(
    'div',
    { class: 'jp-GpuMagics-holder', 'data-source': holder.source ?? '' },
    el('span', {}, `${holderGpuLabel(holder)} \u00b7 ${holderRole(holder)}`),
    // one process: the notebook's total above is its figure
    el('span', { class: 'jp-GpuMagics-num' }, withBytes ? formatBytes(holder.used_memory) : ''),
    tag.text ? el('span', { class: 'jp-GpuMagics-tag', title: tag.title }, tag.text) : el('span', {})
  );
}
