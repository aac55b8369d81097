import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { Dialog, ICommandPalette, showDialog } from '@jupyterlab/apputils';
import { ILauncher } from '@jupyterlab/launcher';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';
import { LabIcon } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import {
  adaptProblem,
  clusterCommand,
  FREE_NOTEBOOK_COMMAND,
  parseAdapt,
  parseWorkers,
  runInKernel,
  scaleProblem
} from './clusters';
import { MonitorConnection } from './connection';
import { GpuPanelModel } from './model';
import { GpuPanel } from './panel';
import { GpuStatusItem } from './statusItem';
import gpuSvg from '../style/icons/gpu.svg';

/** The plugin id; also the settings id (`schema/plugin.json`). */
export const PLUGIN_ID = 'gpu-magics:plugin';
export const OPEN_COMMAND = 'gpu-magics:open';
const PANEL_ID = 'gpu-magics-panel';
const MIN_INTERVAL = 100;
const STATUS_ID = 'gpu-magics:status';

/** The kernel id of a notebook or console widget (anything with a session context), or `null`. */
function kernelIdOf(widget: Widget | null): string | null {
  const context = (widget as { sessionContext?: { session?: { kernel?: { id: string } | null } | null } } | null)
    ?.sessionContext;
  return context?.session?.kernel?.id ?? null;
}

export const gpuIcon = new LabIcon({ name: 'gpu-magics:gpu', svgstr: gpuSvg });

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'Live GPU charts, clusters and GPU memory by notebook.',
  autoStart: true,
  optional: [ILayoutRestorer, ICommandPalette, ILauncher, ISettingRegistry, IStatusBar],
  activate: (
    app: JupyterFrontEnd,
    restorer: ILayoutRestorer | null,
    palette: ICommandPalette | null,
    launcher: ILauncher | null,
    settings: ISettingRegistry | null,
    statusBar: IStatusBar | null
  ): void => {
    const model = new GpuPanelModel({ maxPoints: 300 });
    const connection = new MonitorConnection(model, {
      settings: app.serviceManager.serverSettings
    });
    const panel = new GpuPanel(model, {
      cluster: async (cluster, request) => {
        if (!cluster.kernel_id) {
          throw new Error('This cluster has no kernel to run the command in.');
        }
        await runInKernel(
          app.serviceManager.kernels,
          cluster.kernel_id,
          clusterCommand(request)
        );
        await connection.refresh();
      },
      askWorkers: async cluster => {
        const result = await showDialog({
          title: `Scale ${cluster.name}`,
          body: new CheckedInput('Number of workers', String(cluster.workers), scaleProblem, parseWorkers),
          focusNodeSelector: 'input',
          buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Scale' })]
        });
        return result.button.accept ? result.value : null;
      },
      askAdapt: async cluster => {
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
      },
      confirmStop: async cluster => {
        const result = await showDialog({
          title: `Stop ${cluster.name}?`,
          body: `Its kernel ${cluster.path ? `(${cluster.path}) ` : ''}runs %gpucluster stop; work on the cluster is lost.`,
          buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Stop' })]
        });
        return result.button.accept;
      },
      confirmRestart: async cluster => {
        const result = await showDialog({
          title: `Restart ${cluster.name}?`,
          body:
            `Its kernel ${cluster.path ? `(${cluster.path}) ` : ''}runs %gpucluster restart: every worker ` +
            'starts afresh, and the data and state they hold (persisted collections, futures, imports) are lost.',
          buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Restart' })]
        });
        return result.button.accept;
      },
      freeCached: async owner => {
        if (!owner.kernelId) {
          throw new Error('This notebook has no kernel to run the command in.');
        }
        await runInKernel(
          app.serviceManager.kernels,
          owner.kernelId,
          FREE_NOTEBOOK_COMMAND,
          'The notebook\u2019s kernel is not running on this server.'
        );
        await connection.refresh();
      },
      openPath: path => void app.commands.execute('docmanager:open', { path })
    });
    panel.id = PANEL_ID;
    panel.title.icon = gpuIcon;
    panel.title.caption = 'GPUs';

    // Sample only while the panel is shown; the model (and its bounded charts) stays.
    panel.visibilityChanged.connect((_, visible) =>
      visible ? connection.start() : connection.stop()
    );
    panel.disposed.connect(() => connection.dispose());
    // After the server refused the panel (403), reconnect only when the user asks.
    panel.retryRequested.connect(() => connection.retry());

    app.shell.add(panel, 'left', { rank: 700 });
    restorer?.add(panel, PANEL_ID);

    app.commands.addCommand(OPEN_COMMAND, {
      label: 'GPU Panel',
      caption: 'Live GPU charts, clusters and GPU memory by notebook',
      icon: args => (args['isPalette'] ? undefined : gpuIcon),
      execute: () => app.shell.activateById(PANEL_ID)
    });
    palette?.addItem({ command: OPEN_COMMAND, category: 'GPU' });

    if (statusBar) {
      const item = new GpuStatusItem(
        () => kernelIdOf(app.shell.currentWidget),
        () => app.shell.activateById(PANEL_ID),
        app.serviceManager.serverSettings
      );
      item.id = 'gpu-magics-status';
      statusBar.registerStatusItem(STATUS_ID, { item, align: 'left', rank: 50 });
      const shell = app.shell as { currentChanged?: { connect(fn: () => void): void } };
      shell.currentChanged?.connect(() => item.render());
    }
    launcher?.add({ command: OPEN_COMMAND, category: 'Other', rank: 50 });

    if (settings) {
      void settings.load(PLUGIN_ID).then(loaded => {
        const apply = () => {
          const interval = Number(loaded.get('interval').composite);
          if (Number.isFinite(interval)) {
            connection.setInterval(Math.max(MIN_INTERVAL, interval));
          }
        };
        apply();
        loaded.changed.connect(apply);
      }).catch(reason => console.warn('gpu-magics: settings not loaded', reason));
    }
  }
};

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

export default plugin;
