/**
 * GPU memory by notebook: who holds what, largest first, a line per process with its GPU and where it is known
 * from, what the process says it holds (arrays, cached, context), and "Free cached", which runs
 * `%gpucluster free` in the notebook's kernel (as the clusters' buttons run their magic there): its kernel and its
 * cluster's workers give back what their pools cache.
 */
import { el } from '../dom';
import { formatBytes } from '../../format';
import {
  holderGpuLabel,
  holderRole,
  holderSourceTag,
  IOwnerCap,
  IOwnerTotal,
  splitText
} from '../../model/panelModel';
import type { IHolder, ITopName } from '../../types';
import { barFill, button, splitView } from '../controls';
import { ElsewhereHoldersFold } from './elsewhere';

export interface IMemoryActions {
  /** Have the owner's kernel give back what its pools cache; resolves when it has. */
  freeCached(owner: IOwnerTotal): Promise<void>;
}

/** What the list shows (the panel's model has it). */
export interface IMemoryState {
  /** GPU memory held per notebook (or kernel, or process), largest first. */
  memoryByOwner(): IOwnerTotal[];
  /** GPUs whose processes could not be read. */
  readonly unreadableGpus: number[];
  /** Whether they have been read at all. */
  readonly holdersRead?: boolean;
  /** GPUs whose processes' figures (read every few seconds) add up to more than the GPU uses now. */
  holdersAboveGpuUse?(): number[];
  /** The processes of kernels this server does not run: folded under the list. */
  readonly holdersElsewhere?: IHolder[];
}

export class MemoryView {
  readonly node = el('div', { class: 'jp-GpuMagics-holders' });
  private _busy = new Set<string>(); // owners freeing now
  private _errors = new Map<string, string>();
  private _elsewhere = new ElsewhereHoldersFold();
  private _namesOpen = new Set<string>(); // the holders whose names the user opened (each render draws them again)

  /** `changed` is called when an action starts or ends: the owner renders the list again. */
  constructor(
    private readonly _actions?: IMemoryActions,
    private readonly _changed: () => void = () => undefined
  ) {}

  render(state: IMemoryState): void {
    const owners = state.memoryByOwner();
    const children: HTMLElement[] = [];
    if (owners.length === 0) {
      const read = state.holdersRead ?? true;
      children.push(
        el(
          'div',
          { class: 'jp-GpuMagics-empty' },
          !read
            ? 'Reading the GPUs’ processes…'
            : state.holdersElsewhere?.length
              ? 'No process of this server’s notebooks holds GPU memory.'
              : 'No process holds GPU memory.'
        )
      );
    } else {
      children.push(...owners.map(owner => this._owner(owner)));
    }
    const above = state.holdersAboveGpuUse?.() ?? [];
    if (above.length && owners.length) {
      children.push(
        el(
          'div',
          { class: 'jp-GpuMagics-note', 'data-note': 'holders-age' },
          `Processes are read every few seconds, the cards every second: ${gpuList(above)} now than listed here.`
        )
      );
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
    const fold = this._elsewhere.render(state.holdersElsewhere ?? []);
    if (fold) {
      children.push(fold);
    }
    this.node.replaceChildren(...children);
  }

  /** A notebook (or kernel, or process) with its total, its holders below, and Free cached where it can. */
  private _owner(owner: IOwnerTotal): HTMLElement {
    const view = el(
      'div',
      { class: 'jp-GpuMagics-owner', 'data-owner': owner.owner },
      el(
        'div',
        { class: 'jp-GpuMagics-ownerTitle' },
        el('span', { class: 'jp-GpuMagics-ownerName', title: ownerTitle(owner) }, owner.owner),
        el('span', { class: 'jp-GpuMagics-num' }, formatBytes(owner.bytes))
      ),
      ...owner.caps.map(capLine),
      ...owner.holders.flatMap(holder => [
        ...holderLines(holder, owner.holders.length > 1),
        ...this._names(holder)
      ])
    );
    if (this._actions && owner.canFree && owner.cached !== null) {
      const busy = this._busy.has(owner.owner);
      const cached = owner.cached;
      view.append(
        el(
          'div',
          { class: 'jp-GpuMagics-buttons' },
          button('Free cached', cached > 0 && !busy, () => void this._free(owner), {
            title:
              cached > 0
                ? `Runs %gpucluster free in its kernel: the kernel and its cluster\u2019s workers give the ` +
                  `${formatBytes(cached)} their memory pools cache back to the GPUs (arrays in use stay)`
                : 'Its memory pools cache nothing'
          })
        )
      );
      if (busy) {
        view.append(el('div', { class: 'jp-GpuMagics-busy' }, 'Freeing\u2026 (waits for the kernel if it is busy)'));
      }
    }
    const error = this._errors.get(owner.owner);
    if (error) {
      view.append(el('div', { class: 'jp-GpuMagics-error' }, error));
    }
    return view;
  }

  /** A kernel's biggest names on the holder's GPU, folded; open where the user opened it. */
  private _names(holder: IHolder): HTMLElement[] {
    const names = holder.top_names ?? [];
    if (names.length === 0) {
      return [];
    }
    const key = `${holder.pid}:${holder.gpu_uuid}`;
    const fold = el(
      'details',
      { class: 'jp-GpuMagics-names', 'data-names': key },
      el(
        'summary',
        {
          class: 'jp-GpuMagics-namesSummary',
          title: 'The names that hold this memory, biggest first (%gpumemory in the notebook lists them all)'
        },
        namesSummary(names)
      ),
      ...names.map(name =>
        el(
          'div',
          { class: 'jp-GpuMagics-name', title: `${name.name}: ${name.what}; ${name.give_back} gives it back` },
          el('span', { class: 'jp-GpuMagics-nameText' }, name.name),
          el('span', { class: 'jp-GpuMagics-num' }, formatBytes(name.bytes))
        )
      )
    );
    fold.open = this._namesOpen.has(key);
    fold.addEventListener('toggle', () => {
      if (fold.open) {
        this._namesOpen.add(key);
      } else {
        this._namesOpen.delete(key);
      }
    });
    return [fold];
  }

  private async _free(owner: IOwnerTotal): Promise<void> {
    if (!this._actions) {
      return;
    }
    this._busy.add(owner.owner);
    this._errors.delete(owner.owner);
    this._changed();
    try {
      await this._actions.freeCached(owner);
    } catch (error) {
      this._errors.set(owner.owner, error instanceof Error ? error.message : String(error));
    } finally {
      this._busy.delete(owner.owner);
      this._changed();
    }
  }
}

/**
 * One holder: the GPU (with its host when remote), who, and where the row comes from; under it, what the process
 * says it holds, where it says.
 */
function holderLines(holder: IHolder, withBytes: boolean): HTMLElement[] {
  const tag = holderSourceTag(holder);
  const lines: HTMLElement[] = [
    el(
      'div',
      { class: 'jp-GpuMagics-holder', 'data-source': holder.source ?? '' },
      el('span', {}, `${holderGpuLabel(holder)} \u00b7 ${holderRole(holder)}`),
      // one process: the notebook's total above is its figure
      el('span', { class: 'jp-GpuMagics-num' }, withBytes ? formatBytes(holder.used_memory) : ''),
      tag.text ? el('span', { class: 'jp-GpuMagics-tag', title: tag.title }, tag.text) : el('span', {})
    )
  ];
  const split = splitText(holder.array_memory, holder.cached_memory, holder.context_memory);
  const view = splitView(
    holder.array_memory,
    holder.cached_memory,
    holder.context_memory,
    `${split}: what the process says it holds (in use by arrays, cached by its pool: Free cached gives it ` +
      'back, its CUDA context)'
  );
  if (view) {
    lines.push(view);
  }
  return lines;
}

/** How full a GPU is against its cap: `over` above it, `near` from 90% of it, else `under`. */
export type CapLevel = 'under' | 'near' | 'over';

export function capLevel(used: number, cap: number): CapLevel {
  if (used > cap) {
    return 'over';
  }
  return used >= 0.9 * cap ? 'near' : 'under';
}

/** A cap as the user wrote it: "8 GiB" (not "8.0 GiB"), "7.5 GiB". */
export function capBytes(cap: number): string {
  return formatBytes(cap).replace(/\.0 /, ' ');
}

/** What binds and what does not, the same whoever set the cap. */
const CAP_BINDS =
  'The cap binds what CuPy, PyTorch, JAX and RMM allocate; memory taken outside them is counted here but not stopped.';

/** The cap line's tooltip: who set the cap, how to change it, and what it binds. */
export function capTitle(cap: Pick<IOwnerCap, 'cap' | 'by'>): string {
  const size = capBytes(cap.cap);
  const who =
    cap.by === 'notebook'
      ? `This notebook capped itself at ${size} a GPU (%gpumemory --cap); %gpumemory --cap off lifts it to the ` +
        'server\u2019s cap, if any.'
      : `The server caps each notebook at ${size} a GPU (c.GpuMagicsServer.memory_cap).`;
  return `${who} ${CAP_BINDS}`;
}

/** " · 6.1 GiB of its 8 GiB cap", or " · 9.2 GiB: over its 8 GiB cap": the figures after the GPU's name. */
function capFigures(cap: IOwnerCap, level: CapLevel): string {
  const used = formatBytes(cap.used);
  const size = capBytes(cap.cap);
  return level === 'over' ? ` \u00b7 ${used}: over its ${size} cap` : ` \u00b7 ${used} of its ${size} cap`;
}

/** A notebook's memory on one GPU against its cap: "GPU 0 · 6.1 GiB of its 8 GiB cap" over a thin meter. */
export function capLine(cap: IOwnerCap): HTMLElement {
  const level = capLevel(cap.used, cap.cap);
  return el(
    'div',
    {
      class: 'jp-GpuMagics-cap',
      'data-cap': cap.gpuLabel,
      'data-level': level,
      'data-over': String(level === 'over'),
      'data-by': cap.by,
      title: capTitle(cap)
    },
    el(
      'div',
      { class: 'jp-GpuMagics-capText' },
      el('span', { class: 'jp-GpuMagics-capGpu' }, cap.gpuLabel),
      el('span', { class: 'jp-GpuMagics-capFigures' }, capFigures(cap, level))
    ),
    el('div', { class: 'jp-GpuMagics-bar jp-GpuMagics-capMeter' }, barFill(cap.cap > 0 ? (100 * cap.used) / cap.cap : 100))
  );
}

/** `held by x`, `held by x and 2 more names`. */
export function namesSummary(names: readonly ITopName[]): string {
  const [first, ...rest] = names;
  const more = rest.length ? ` and ${rest.length} more name${rest.length > 1 ? 's' : ''}` : '';
  return first ? `held by ${first.name}${more}` : '';
}

/** The owner's tooltip: its name, and the account its process runs as where that is another user's. */
function ownerTitle(owner: IOwnerTotal): string {
  const user = owner.holders[0]?.user;
  return user && owner.holders[0]?.yours === false ? `${owner.owner}: another user\u2019s (${user})` : owner.owner;
}

/** `GPU 0 uses less`, `GPU 0 and GPU 1 use less`, `GPU 0, GPU 1 and GPU 3 use less`. */
export function gpuList(indices: readonly number[]): string {
  const names = indices.map(index => `GPU ${index}`);
  const joined = names.length > 1 ? `${names.slice(0, -1).join(', ')} and ${names[names.length - 1]}` : names[0];
  return `${joined} ${names.length > 1 ? 'use' : 'uses'} less`;
}
