/** @jest-environment jsdom */
/** A cluster's card: what Stop does is said on it, a Restart that is off says why, workers named by an id read. */
import '../jsdomShim';

import { buttonsHint, memberNames, restartOff } from '../../src/model/clusters';
import { ClustersView, IClusterActions } from '../../src/views/sections/clusters';
import type { ICluster } from '../../src/types';
import { cluster, factsOf, member, memberGpu } from '../fixtures';

const actions: IClusterActions = {
  cluster: () => Promise.resolve(),
  askWorkers: () => Promise.resolve(null),
  askAdapt: () => Promise.resolve(null),
  confirmStop: () => Promise.resolve(false),
  confirmRestart: () => Promise.resolve(false),
  openPath: () => undefined
};

function card(shown: ICluster): HTMLElement {
  const view = new ClustersView(actions, () => undefined);
  view.render({ clusters: [shown], clustersError: null, connection: { phase: 'open' } }, 1700000000);
  return view.node.querySelector('.jp-GpuMagics-cluster') as HTMLElement;
}

function buttons(node: HTMLElement): { text: string; disabled: boolean; title: string }[] {
  return Array.from(node.querySelectorAll('.jp-GpuMagics-buttons:not(.jp-GpuMagics-freeButtons):not(.jp-GpuMagics-parkButtons) button')).map(b => ({
    text: b.textContent ?? '',
    disabled: (b as HTMLButtonElement).disabled,
    title: b.getAttribute('title') ?? ''
  }));
}

describe('a cluster card', () => {
  it('says beside Stop that it closes a cluster the notebook made', () => {
    const node = card(cluster({ kind: 'gpu', kernel_running: true }));
    expect(buttons(node).map(b => b.text)).toEqual(['Stop', 'Restart', 'Scale', 'Adapt']);
    expect(node.querySelector('.jp-GpuMagics-buttonsHint')?.textContent).toBe(
      'Stop closes the cluster and gives its GPUs back.'
    );
  });

  it('calls it Detach for a cluster the notebook did not make, and says why Restart is off', () => {
    const node = card(cluster({ kind: 'adopted', manager: 'LocalCluster', kernel_running: true }));
    const [detach, restart] = buttons(node);
    expect(detach).toMatchObject({ text: 'Detach', disabled: false });
    expect(restart).toMatchObject({ text: 'Restart', disabled: true });
    expect(restart?.title).toBe('No Restart: only the notebook that started it can restart its workers.');
    expect(node.querySelector('.jp-GpuMagics-buttonsHint')?.textContent).toBe(
      'Detach lets go of the cluster; it keeps running. No Restart: only the notebook that started it can ' +
        'restart its workers.'
    );
  });

  it('names workers that are only an id "worker N", with the id in the tooltip', () => {
    const ids = ['9f0c2d1e4b3a4c5d8e7f6a5b4c3d2e1f', '0a1b2c3d4e5f60718293a4b5c6d7e8f9'] as const;
    const members = [
      member(ids[0], '10.0.0.7', [memberGpu('10.0.0.7', 0)], { address: 'tls://10.0.0.7:8786' }),
      member(ids[1], '10.0.0.7', [memberGpu('10.0.0.7', 1)], { address: 'tls://10.0.0.6:8786' })
    ];
    expect(Array.from(memberNames(members).values())).toEqual(['worker 2', 'worker 1']);
    const node = card(cluster({ kind: 'gateway', kernel_running: true, members }));
    const names = Array.from(node.querySelectorAll('.jp-GpuMagics-memberName')).map(n => n.textContent);
    expect(names).toEqual(['GPU 0 \u00b7 worker 2', 'GPU 1 \u00b7 worker 1']);
    expect(node.textContent).not.toContain(ids[0]);
    const titles = Array.from(node.querySelectorAll('.jp-GpuMagics-memberGpu')).map(n => n.getAttribute('title'));
    expect(titles[0]).toContain(`worker ${ids[0]}`);
  });

  it('keeps readable worker names and the kernel as they are', () => {
    const members = [member('w0', 'h', []), member('tcp://h:1', 'h', [], { role: 'kernel' })];
    expect(Array.from(memberNames(members).values())).toEqual(['w0', 'kernel']);
    expect(buttonsHint(factsOf('attached'))).toContain('Detach lets go');
    expect(restartOff(factsOf('gpu'))).toContain('not restarted from here');
  });
});
