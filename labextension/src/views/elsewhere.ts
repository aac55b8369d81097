/** Under the cluster cards, folded: the clusters of kernels this server does not run, with where each kernel is. */
import { elsewhereLine, elsewhereSummary, elsewhereWhere } from '../elsewhere';
import type { IClusterElsewhere } from '../types';
import { el } from './dom';

export class ElsewhereFold {
  private _open = false; // kept across renders (each refresh of the list draws it again)

  /** The fold, collapsed unless the user opened it; `null` when every cluster is this server's. */
  render(clusters: readonly IClusterElsewhere[]): HTMLElement | null {
    if (clusters.length === 0) {
      return null;
    }
    const fold = el(
      'details',
      { class: 'jp-GpuMagics-elsewhere' },
      el('summary', { class: 'jp-GpuMagics-elsewhereSummary' }, elsewhereSummary(clusters)),
      ...clusters.map(cluster =>
        el(
          'div',
          { class: 'jp-GpuMagics-elsewhereCluster', 'data-cluster': cluster.name },
          el('div', {}, elsewhereLine(cluster)),
          el('div', { class: 'jp-GpuMagics-note' }, elsewhereWhere(cluster))
        )
      )
    );
    fold.open = this._open;
    fold.addEventListener('toggle', () => {
      this._open = fold.open;
    });
    return fold;
  }
}
