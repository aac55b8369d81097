/**
 * Under the clusters: what kernels that have ended left on the server's GPUs, one line per GPU with "End them"
 * (confirmed, then the server ends the processes by pid and start time, and the view says what it did); and the
 * lines for GPU memory held while idle: on the cluster card of the kernel they belong to, else here.
 */
import { formatBytes } from '../../format';
import type { ILeftoverGroup } from '../../model/panelModel';
import type { ICluster, IEndedLeftover, IEndLeftoversReply, IIdleHold } from '../../types';
import { button } from '../controls';
import { Child, el } from '../dom';

/** Processes named under a line, and in its dialog, at most (a DataLoader may leave dozens). */
export const LISTED = 6;

/** How long what "End them" did stays shown (seconds). */
export const OUTCOME_SHOWN_S = 30;

export interface ILeftoverActions {
  /** Ask before ending a group's processes (a dialog). */
  confirmEndLeftovers(group: ILeftoverGroup): Promise<boolean>;
  /** End the processes (by pid and start time); resolves with what the server did and what is left. */
  endLeftovers(processes: { pid: number; started: number }[]): Promise<IEndLeftoversReply>;
}

/** What the view shows (the panel's model has it). */
export interface ILeftoversState {
  readonly leftovers: ILeftoverGroup[];
  readonly clusters: ICluster[];
  readonly idleHolds: IIdleHold[];
}

/** "Ended pid 12 and pid 13." / "Not ended: pid 14 belongs to another user." */
export function outcomeLines(results: IEndedLeftover[]): string[] {
  const ended = results.filter(result => result.ended).map(result => `pid ${result.pid}`);
  const lines = ended.length ? [`Ended ${joinWords(ended)}.`] : [];
  for (const result of results.filter(r => !r.ended)) {
    lines.push(`Not ended: ${result.reason ?? `pid ${result.pid} (the server did not say why)`}.`);
  }
  return lines;
}

/** "pid 12 python, 4.0 GiB", "pid 13 python": the processes of a group, as the line under it lists them. */
export function processTexts(group: ILeftoverGroup): string[] {
  return group.processes.map(p => `pid ${p.pid} ${p.name}${p.used_memory === null ? '' : `, ${formatBytes(p.used_memory)}`}`);
}

/** "pid 12 python, 4.0 GiB · pid 13 python". */
export function processesText(group: ILeftoverGroup): string {
  return processTexts(group).join(' \u00b7 ');
}

/** The server's line as a line of its own: "Left by a kernel that has ended: ...". */
export function sentence(line: string): string {
  return line.charAt(0).toUpperCase() + line.slice(1);
}

/** `text` with each "(%command ...)" kept on one line. */
export function commandsUnbroken(text: string): Child[] {
  return text.split(/(\(%[^)]*\))/).map((part, index) =>
    index % 2 ? el('span', { class: 'jp-GpuMagics-nowrap' }, part) : part
  );
}

/** The idle-hold line for the card of the cluster `hold`'s kernel started: [] where there is nothing to say. */
export function idleHoldNodes(hold: IIdleHold | null): HTMLElement[] {
  if (!hold?.line) {
    return [];
  }
  return [
    el(
      'div',
      {
        class: 'jp-GpuMagics-idleHold',
        title:
          'GPU memory this notebook holds (its kernel, its workers, its ranks) on GPUs that have sat idle: ' +
          'giving it back lets others use the GPUs'
      },
      ...commandsUnbroken(`This notebook ${hold.line}`)
    )
  ];
}

/**
 * Puts the idle-hold line of `cluster`'s kernel into its card `row` (under its idle timeout, else under its
 * notebook and scheduler line). `state` is the panel's model (anything with `idleHold`).
 */
export function addIdleHold(row: HTMLElement, state: object, cluster: ICluster): void {
  const source = state as { idleHold?(kernelId: string | null): IIdleHold | null };
  const nodes = idleHoldNodes(typeof source.idleHold === 'function' ? source.idleHold(cluster.kernel_id) : null);
  if (!nodes.length) {
    return;
  }
  const after = row.querySelector(':scope > .jp-GpuMagics-idle') ?? row.querySelector(':scope > .jp-GpuMagics-clusterMeta');
  if (after) {
    after.after(...nodes);
  } else {
    row.append(...nodes);
  }
}

export class LeftoversView {
  readonly node = el('div', { class: 'jp-GpuMagics-leftovers' });
  private _busy = new Set<string>(); // GPU labels being ended
  private _outcome: { lines: string[]; error: boolean; time: number } | null = null;

  /** `changed` is called when an action starts or ends: the owner renders the view again. */
  constructor(
    private readonly _actions: ILeftoverActions,
    private readonly _changed: () => void
  ) {}

  /** `now`: seconds since the epoch (how long the outcome of "End them" stays). */
  render(state: ILeftoversState, now: number = Date.now() / 1000): void {
    const children: HTMLElement[] = [];
    // kernels with a cluster card say it there
    const carded = new Set(state.clusters.map(cluster => cluster.kernel_id));
    for (const hold of state.idleHolds) {
      if (!carded.has(hold.kernel_id) && hold.line) {
        const who = hold.path ?? `kernel ${hold.kernel_id.slice(0, 8)}`;
        children.push(el('div', { class: 'jp-GpuMagics-idleHold' }, ...commandsUnbroken(`${who} ${hold.line}`)));
      }
    }
    for (const group of state.leftovers) {
      children.push(this._group(group));
    }
    if (this._outcome && now - this._outcome.time > OUTCOME_SHOWN_S) {
      this._outcome = null;
    }
    if (this._outcome) {
      const lines = this._outcome.lines.map(line => el('div', {}, line));
      const kind = this._outcome.error ? 'jp-GpuMagics-error' : 'jp-GpuMagics-note';
      children.push(el('div', { class: `jp-GpuMagics-leftoversOutcome ${kind}`, role: 'status' }, ...lines));
    }
    this.node.replaceChildren(...children);
    this.node.hidden = children.length === 0;
  }

  private _group(group: ILeftoverGroup): HTMLElement {
    const busy = this._busy.has(group.gpuLabel);
    return el(
      'div',
      { class: 'jp-GpuMagics-leftover', 'data-gpu': group.gpuLabel },
      el('div', { class: 'jp-GpuMagics-leftoverLine' }, ...gpuUnbroken(sentence(group.line), group.gpuLabel)),
      el(
        'div',
        { class: 'jp-GpuMagics-leftoverProcesses' },
        ...processTexts(group)
          .slice(0, LISTED)
          .flatMap((text, index) => [index ? ' \u00b7 ' : '', el('span', { class: 'jp-GpuMagics-nowrap' }, text)]),
        group.processes.length > LISTED ? ` and ${group.processes.length - LISTED} more` : ''
      ),
      el(
        'div',
        { class: 'jp-GpuMagics-buttons' },
        button(busy ? 'Ending\u2026' : 'End them', !busy, () => void this._end(group), {
          title:
            'Ends these processes (SIGTERM, then SIGKILL): each only if its pid still names the process its ' +
            'kernel started, and only your own'
        })
      )
    );
  }

  private async _end(group: ILeftoverGroup): Promise<void> {
    if (!(await this._actions.confirmEndLeftovers(group))) {
      return;
    }
    this._busy.add(group.gpuLabel);
    this._changed();
    try {
      const reply = await this._actions.endLeftovers(group.processes.map(({ pid, started }) => ({ pid, started })));
      const error = reply.results.some(result => !result.ended);
      this._outcome = { lines: outcomeLines(reply.results), error, time: Date.now() / 1000 };
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      this._outcome = { lines: [`Could not end them: ${message}`], error: true, time: Date.now() / 1000 };
    } finally {
      this._busy.delete(group.gpuLabel);
      this._changed();
    }
  }
}

/** `line` with the GPU it ends with ("GPU 1") kept on one line. */
function gpuUnbroken(line: string, gpuLabel: string): Child[] {
  const suffix = ` on ${gpuLabel}`;
  if (!line.endsWith(suffix)) {
    return [line];
  }
  return [line.slice(0, -gpuLabel.length), el('span', { class: 'jp-GpuMagics-nowrap' }, gpuLabel)];
}

function joinWords(words: string[]): string {
  return words.length <= 1 ? words.join('') : `${words.slice(0, -1).join(', ')} and ${words[words.length - 1]}`;
}
