/** The cluster card's dialogs: Scale and Adapt ask for numbers (checked as they are typed), Stop and Restart
 * ask for confirmation. */
import { Dialog, showDialog } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import { adaptProblem, clusterFacts, parseAdapt, parseWorkers, scaleProblem } from '../../model/clusters';
import type { ICluster } from '../../types';

export async function askWorkers(cluster: ICluster): Promise<number | null> {
  const result = await showDialog({
    title: `Scale ${cluster.name}`,
    body: new CheckedInput('Number of workers', String(cluster.workers), scaleProblem, parseWorkers),
    focusNodeSelector: 'input',
    buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Scale' })]
  });
  return result.button.accept ? result.value : null;
}

export async function askAdapt(cluster: ICluster): Promise<[number, number] | null> {
  const bounds = cluster.adaptive ?? [0, Math.max(1, cluster.workers)];
  const result = await showDialog({
    title: `Adapt ${cluster.name}`,
    body: new CheckedInput(
      'Least and most workers (the cluster adds workers when tasks wait and gives them back when idle)',
      `${bounds[0]} ${bounds[1]}`,
      adaptProblem,
      parseAdapt
    ),
    focusNodeSelector: 'input',
    buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Adapt' })]
  });
  return result.button.accept ? result.value : null;
}

export async function confirmStop(cluster: ICluster): Promise<boolean> {
  const kernel = `Its kernel ${cluster.path ? `(${cluster.path}) ` : ''}runs %gpucluster stop`;
  const detach = clusterFacts(cluster).ends === 'detach';
  const result = await showDialog({
    title: `${detach ? 'Detach from' : 'Stop'} ${cluster.name}?`,
    body: detach
      ? `${kernel}: the notebook lets go of the cluster, which keeps running with its workers.`
      : `${kernel}: the cluster closes; work on it is lost.`,
    buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: detach ? 'Detach' : 'Stop' })]
  });
  return result.button.accept;
}

export async function confirmRestart(cluster: ICluster): Promise<boolean> {
  const result = await showDialog({
    title: `Restart ${cluster.name}?`,
    body:
      `Its kernel ${cluster.path ? `(${cluster.path}) ` : ''}runs %gpucluster restart: every worker ` +
      'starts afresh, and the data and state they hold (persisted collections, futures, imports) are lost.',
    buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Restart' })]
  });
  return result.button.accept;
}

/**
 * The Scale and Adapt dialogs' body: a field, with what is wrong with it said under it. An invalid field keeps
 * the dialog's OK button disabled (the dialog disables it while an input is `:invalid`).
 */
class CheckedInput<T> extends Widget implements Dialog.IBodyWidget<T | null> {
  private readonly _input = document.createElement('input');
  private readonly _message = document.createElement('div');

  constructor(
    text: string,
    value: string,
    private readonly _problem: (text: string) => string | null,
    private readonly _parse: (text: string) => T | null
  ) {
    super();
    this.addClass('jp-GpuMagics-scaleDialog');
    const label = document.createElement('label');
    label.textContent = text;
    this._input.type = 'text';
    this._input.inputMode = 'numeric';
    this._input.className = 'jp-mod-styled';
    this._input.value = value;
    this._input.setAttribute('aria-describedby', 'jp-GpuMagics-scaleMessage');
    this._message.id = 'jp-GpuMagics-scaleMessage';
    this._message.className = 'jp-GpuMagics-scaleMessage';
    this._message.setAttribute('role', 'alert');
    label.appendChild(this._input);
    this.node.append(label, this._message);
    this._input.addEventListener('input', () => this._check());
    this._input.addEventListener('focus', () => this._input.select());
  }

  getValue(): T | null {
    return this._parse(this._input.value);
  }

  private _check(): void {
    const problem = this._problem(this._input.value);
    this._input.setCustomValidity(problem ?? '');
    this._message.textContent = problem ?? '';
    // the dialog checks validity on input in the capture phase, before this listener: ask it to check again
    this.node.dispatchEvent(new Event('input', { bubbles: true }));
  }
}
