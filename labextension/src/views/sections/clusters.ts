/**
 * The clusters the kernels started, one row each: name and what gives its workers, notebook, scheduler, uptime, dashboard, the
 * members by host, the batch jobs behind them (SLURM), and Park / Resume, Stop / Restart / Scale / Adapt, which act
 * through the owning kernel (see `../../model/clusters`); the line the kernel said for an action shows on the card.
 */
import {
  adaptText,
  buttonsHint,
  ClusterAction,
  clusterCached,
  clusterFacts,
  clusterMembers,
  clusterTitle,
  idleState,
  idleText,
  jobLines,
  parkedText,
  restartOff
} from '../../model/clusters';
import { Child, el } from '../dom';
import { formatAge, formatBytes } from '../../format';
import type { ConnectionPhase } from '../../model/panelModel';
import type { ICluster, IClusterElsewhere } from '../../types';
import { button, link } from '../controls';
import { addIdleHold } from './leftovers';
import { membersView } from './members';
import { ElsewhereFold } from './elsewhere';

/** How long a card shows what its last action said (the kernel's line: a silent request's output reaches no cell). */
const SAID_FOR_S = 60;

export interface IClusterActions {
  /** Run a cluster action in its kernel; resolves when the kernel has done it, with the lines it said. */
  cluster(cluster: ICluster, request: ClusterAction): Promise<string[] | void>;
  /** Ask for a number of workers (a dialog); `null` when cancelled. */
  askWorkers(cluster: ICluster): Promise<number | null>;
  /** Ask for the least and most workers to adapt between (a dialog); `null` when cancelled. */
  askAdapt(cluster: ICluster): Promise<[number, number] | null>;
  /** Confirm stopping a cluster. */
  confirmStop(cluster: ICluster): Promise<boolean>;
  /** Confirm restarting a cluster's workers (their data and state are lost). */
  confirmRestart(cluster: ICluster): Promise<boolean>;
  /** Open the notebook at `path`. */
  openPath(path: string): void;
}

/** What the list shows (the panel's model has it). */
export interface IClustersState {
  readonly clusters: ICluster[];
  readonly clustersError: string | null;
  readonly connection: { readonly phase: ConnectionPhase };
  /** The command that starts a cluster on the server's machine. */
  readonly startClusterCommand?: string;
  /** The clusters of kernels this server does not run: folded under its own. */
  readonly clustersElsewhere?: IClusterElsewhere[];
}

export class ClustersView {
  readonly node = el('div', { class: 'jp-GpuMagics-clusters' });
  private _busy = new Map<string, string>(); // cluster key -> what it is doing
  private _errors = new Map<string, string>(); // cluster key -> last error
  private _said = new Map<string, { lines: string[]; at: number }>(); // cluster key -> what its last action said
  private _elsewhere = new ElsewhereFold();

  /** `changed` is called when an action starts or ends: the owner renders the list again. */
  constructor(
    private readonly _actions: IClusterActions,
    private readonly _changed: () => void
  ) {}

  /** `now`: seconds since the epoch, for the uptimes. */
  render(state: IClustersState, now: number = Date.now() / 1000): void {
    const children: HTMLElement[] = [];
    // while the server refuses the panel, the banner says why; the lists' own errors would only repeat it
    if (state.clustersError && state.connection.phase !== 'forbidden') {
      children.push(el('div', { class: 'jp-GpuMagics-error' }, state.clustersError));
    }
    if (state.clusters.length === 0) {
      children.push(
        el(
          'div',
          { class: 'jp-GpuMagics-empty' },
          state.clustersElsewhere?.length
            ? 'No cluster of this server\u2019s notebooks. Start one from a notebook with '
            : 'No cluster running. Start one from a notebook with ',
          el('code', {}, state.startClusterCommand ?? '%gpucluster'),
          '.'
        )
      );
    }
    for (const cluster of state.clusters) {
      const row = this._row(cluster, now);
      addIdleHold(row, state, cluster); // GPU memory its kernel holds while the GPUs sit idle
      children.push(row);
    }
    const fold = this._elsewhere.render(state.clustersElsewhere ?? []);
    if (fold) {
      children.push(fold);
    }
    this.node.replaceChildren(...children);
  }

  private _row(cluster: ICluster, now: number): HTMLElement {
    const key = clusterKey(cluster);
    const busy = this._busy.get(key);
    // what its manager says it allows (a cluster the notebook did not make is not restarted from here)
    const facts = clusterFacts(cluster);
    const canAct = cluster.kernel_running && !busy;
    const notebook = cluster.path
      ? link(cluster.path, () => this._actions.openPath(cluster.path as string))
      : el('span', {}, cluster.kernel_id ? `kernel ${cluster.kernel_id.slice(0, 8)}` : 'no kernel');
    const row = el(
      'div',
      { class: 'jp-GpuMagics-cluster', 'data-cluster': cluster.name },
      el(
        'div',
        { class: 'jp-GpuMagics-clusterTitle' },
        el('strong', {}, cluster.name),
        el('span', { class: 'jp-GpuMagics-clusterKind' }, clusterTitle(cluster))
      ),
      el(
        'div',
        { class: 'jp-GpuMagics-clusterMeta' },
        notebook,
        el('span', {}, ` \u00b7 ${cluster.scheduler_address} \u00b7 `),
        // its own age (a gateway cluster connected to: since the gateway started it), on one line
        el('span', { class: 'jp-GpuMagics-uptime' }, `up ${formatAge(cluster.up_since ?? cluster.started_at, now)}`),
        ...dashboardLink(cluster)
      )
    );
    const parked = parkedText(cluster, now);
    if (parked) {
      row.append(
        el(
          'div',
          {
            class: 'jp-GpuMagics-parked',
            title:
              'Its GPU workers gave their GPUs back to the server (%gpucluster park); their data waits in host ' +
              'memory. The next cell that sends the cluster work, or %gpucluster resume, takes the GPUs back.'
          },
          parked
        )
      );
    }
    if (parked || facts.parkable) {
      // in one place: Park while the GPU workers it started hold their GPUs, Resume once parked
      row.append(
        el(
          'div',
          { class: 'jp-GpuMagics-buttons jp-GpuMagics-parkButtons' },
          parked
            ? button('Resume', canAct, () => void this._act(cluster, { action: 'resume' }, 'Resuming'), {
                title: 'Runs %gpucluster resume in its kernel: its workers take their GPUs back now, with their data'
              })
            : button('Park', canAct, () => void this._act(cluster, { action: 'park' }, 'Parking'), {
                title:
                  'Runs %gpucluster park in its kernel: its GPU workers give their GPUs back to the server, their ' +
                  'data kept in host memory, until the next cell that sends the cluster work'
              })
        )
      );
    }
    const idle = idleText(cluster, now);
    if (idle) {
      row.append(
        el(
          'div',
          {
            class: 'jp-GpuMagics-idle',
            'data-idle': idleState(cluster, now),
            title:
              facts.ends === 'detach'
                ? 'After this long without a task, the notebook detaches from the cluster (it keeps running)'
                : 'After this long without a task, the notebook closes the cluster and frees its GPUs ' +
                  '(%gpucluster --idle-timeout)'
          },
          idle
        )
      );
    }
    const adapting = adaptText(cluster);
    if (adapting) {
      row.append(el('div', { class: 'jp-GpuMagics-adaptive' }, adapting));
    }
    const jobs = jobLines(cluster);
    if (jobs.length) {
      const lines = jobs.map(line => el('div', { class: 'jp-GpuMagics-job' }, line));
      row.append(el('div', { class: 'jp-GpuMagics-jobs' }, ...lines));
    }
    row.append(plainCellsLine(cluster));
    const members = clusterMembers(cluster);
    if (members.length) {
      row.append(membersView(members));
    }
    // under the figures it acts on: what the workers' pools cache
    const free = freeButton(cluster, cluster.kernel_running && !busy, () =>
      void this._act(cluster, { action: 'free' }, 'Freeing')
    );
    if (free.length) {
      row.append(el('div', { class: 'jp-GpuMagics-buttons jp-GpuMagics-freeButtons' }, ...free));
    }
    if (cluster.dashboard_note && (cluster.dashboard_link ?? cluster.dashboard_url)) {
      row.append(el('div', { class: 'jp-GpuMagics-note jp-GpuMagics-dashboardNote' }, cluster.dashboard_note));
    }
    row.append(
      el(
        'div',
        { class: 'jp-GpuMagics-buttons' },
        // what Stop does is its word: Detach for a cluster the notebook did not make (it keeps running)
        button(facts.ends === 'detach' ? 'Detach' : 'Stop', canAct, () => void this._stop(cluster), {
          title:
            facts.ends === 'detach'
              ? 'Runs %gpucluster stop in its kernel: the notebook lets go of the cluster, which keeps running'
              : 'Runs %gpucluster stop in its kernel: the cluster closes and gives its GPUs back'
        }),
        button('Restart', canAct && facts.restartable, () => void this._restart(cluster), {
          title: facts.restartable
            ? 'Runs %gpucluster restart in its kernel: its workers start again (their data and state are lost)'
            : restartOff(facts)
        }),
        button('Scale', canAct && facts.scalable, () => void this._scale(cluster)),
        button('Adapt', canAct && facts.scalable, () => void this._adapt(cluster), {
          title:
            'Runs %gpucluster adapt MIN MAX in its kernel: workers are added when tasks wait and given back ' +
            'when idle'
        })
      )
    );
    row.append(el('div', { class: 'jp-GpuMagics-buttonsHint' }, buttonsHint(facts)));
    if (busy) {
      row.append(el('div', { class: 'jp-GpuMagics-busy' }, `${busy}\u2026 (waits for the kernel if it is busy)`));
    }
    const said = this._said.get(key);
    if (said && !busy && now - said.at < SAID_FOR_S) {
      row.append(el('div', { class: 'jp-GpuMagics-said' }, ...said.lines.map(line => el('div', {}, line))));
    }
    const error = this._errors.get(key);
    if (error) {
      row.append(el('div', { class: 'jp-GpuMagics-error' }, error));
    }
    if (!cluster.kernel_running) {
      row.append(
        el('div', { class: 'jp-GpuMagics-note' }, 'Its kernel is not one of this server\u2019s: manage it from there.')
      );
    }
    return row;
  }

  private async _stop(cluster: ICluster): Promise<void> {
    if (await this._actions.confirmStop(cluster)) {
      await this._act(cluster, { action: 'stop' }, 'Stopping');
    }
  }

  private async _restart(cluster: ICluster): Promise<void> {
    if (await this._actions.confirmRestart(cluster)) {
      await this._act(cluster, { action: 'restart' }, 'Restarting');
    }
  }

  private async _scale(cluster: ICluster): Promise<void> {
    const workers = await this._actions.askWorkers(cluster);
    if (workers !== null) {
      await this._act(cluster, { action: 'scale', workers }, `Scaling to ${workers}`);
    }
  }

  private async _adapt(cluster: ICluster): Promise<void> {
    const bounds = await this._actions.askAdapt(cluster);
    if (bounds !== null) {
      const [minimum, maximum] = bounds;
      await this._act(cluster, { action: 'adapt', minimum, maximum }, `Adapting between ${minimum} and ${maximum}`);
    }
  }

  /** Runs the action with the row saying what it does meanwhile, and its error (if any) after. */
  private async _act(cluster: ICluster, request: ClusterAction, doing: string): Promise<void> {
    const key = clusterKey(cluster);
    this._busy.set(key, doing);
    this._errors.delete(key);
    this._said.delete(key);
    this._changed();
    try {
      const said = await this._actions.cluster(cluster, request);
      if (said && said.length) {
        // on its card, the line needs no "%gpucluster: " before it
        const lines = said.map(line => line.replace(/^%gpucluster: /, ''));
        this._said.set(key, { lines, at: Date.now() / 1000 });
      }
    } catch (error) {
      this._errors.set(key, error instanceof Error ? error.message : String(error));
    } finally {
      this._busy.delete(key);
      this._changed();
    }
  }
}

/** "Free cached": the workers give back what their pools cache (none on a cluster whose workers say nothing). */
function freeButton(cluster: ICluster, enabled: boolean, onClick: () => void): HTMLButtonElement[] {
  const cached = clusterCached(cluster);
  if (cached === null) {
    return [];
  }
  const title =
    cached > 0
      ? `Runs %gpucluster free workers in its kernel: the workers give the ${formatBytes(cached)} their memory ` +
        'pools cache back to their GPUs (arrays in use stay)'
      : 'The workers\u2019 memory pools cache nothing';
  return [button('Free cached', enabled && cached > 0, onClick, { title })];
}

function clusterKey(cluster: ICluster): string {
  return `${cluster.pid}/${cluster.name}`;
}

/** " · dashboard ↗": the Dask dashboard, through the link made for this browser where the server has one. */
function dashboardLink(cluster: ICluster): Child[] {
  const href = cluster.dashboard_link ?? cluster.dashboard_url;
  if (!href) {
    return [];
  }
  return [
    ' \u00b7 ',
    el(
      'a',
      {
        class: 'jp-GpuMagics-link jp-GpuMagics-dashboard',
        href,
        target: '_blank',
        rel: 'noopener noreferrer',
        title: cluster.dashboard_note ?? `The Dask dashboard: ${href}`
      },
      'dashboard \u2197'
    )
  ];
}

/** Where the notebook's plain cells run: its session backend (`%gpurun multi-gpu`), or dask's own settings. */
function plainCellsLine(cluster: ICluster): HTMLElement {
  const backend = cluster.plain_cells ?? null;
  return el(
    'div',
    {
      class: 'jp-GpuMagics-plainCells',
      'data-plain-cells': backend ?? 'dask',
      title: backend
        ? `Every plain cell of the notebook runs as under %%gpurun ${backend} (%gpurun off ends it)`
        : "Plain cells run with dask's own settings (NumPy chunks unless the notebook set array.backend); " +
          '%gpurun multi-gpu in the notebook runs every cell on the cluster'
    },
    backend ? `plain cells: ${backend} (%gpurun)` : "plain cells: dask's own settings"
  );
}
