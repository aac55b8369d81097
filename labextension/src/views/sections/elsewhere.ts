/**
 * Folded under the cluster cards and the memory list: the clusters, and the processes holding GPU memory, of kernels
 * this server does not run, with where each kernel is.
 */
import {
  elsewhereHolderLine,
  elsewhereHoldersSummary,
  elsewhereHolderWhere,
  elsewhereLine,
  elsewhereSummary,
  elsewhereWhere
} from '../../model/elsewhere';
import type { IClusterElsewhere, IHolder } from '../../types';
import { Child, el } from '../dom';

/** A `<details>` fold that stays open or closed across renders (each refresh of a list draws it again). */
class Fold {
  private _open = false;

  render(summary: string, ...rows: Child[]): HTMLElement {
    const fold = el(
      'details',
      { class: 'jp-GpuMagics-elsewhere' },
      el('summary', { class: 'jp-GpuMagics-elsewhereSummary' }, summary),
      ...rows
    );
    fold.open = this._open;
    fold.addEventListener('toggle', () => {
      this._open = fold.open;
    });
    return fold;
  }
}

export class ElsewhereFold {
  private _fold = new Fold();

  /** The clusters' fold, collapsed unless the user opened it; `null` when every cluster is this server's. */
  render(clusters: readonly IClusterElsewhere[]): HTMLElement | null {
    if (clusters.length === 0) {
      return null;
    }
    return this._fold.render(
      elsewhereSummary(clusters),
      ...clusters.map(cluster =>
        el(
          'div',
          { class: 'jp-GpuMagics-elsewhereCluster', 'data-cluster': cluster.name },
          el('div', {}, elsewhereLine(cluster)),
          el('div', { class: 'jp-GpuMagics-note' }, elsewhereWhere(cluster))
        )
      )
    );
  }
}

export class ElsewhereHoldersFold {
  private _fold = new Fold();

  /** The processes' fold; `null` when every process holding memory is this server's kernels' (or others'). */
  render(holders: readonly IHolder[]): HTMLElement | null {
    if (holders.length === 0) {
      return null;
    }
    return this._fold.render(
      elsewhereHoldersSummary(holders),
      ...holders.map(holder =>
        el(
          'div',
          { class: 'jp-GpuMagics-elsewhereCluster' },
          el('div', {}, elsewhereHolderLine(holder)),
          el('div', { class: 'jp-GpuMagics-note' }, elsewhereHolderWhere(holder))
        )
      )
    );
  }
}
