import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { ILauncher } from '@jupyterlab/launcher';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';
import { LabIcon } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import { clusterCommand, FREE_NOTEBOOK_COMMAND, runInKernel } from './model/clusters';
import { endLeftovers } from './server/api';
import { MonitorConnection } from './server/connection';
import { GpuPanelModel } from './model/panelModel';
import { GpuPanel } from './panel';
import { GpuStatusItem } from './statusBar/item';
import { askAdapt, askWorkers, confirmRestart, confirmStop } from './views/dialogs/clusters';
import { confirmEndLeftovers } from './views/dialogs/leftovers';
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
        const said = await runInKernel(
          app.serviceManager.kernels,
          cluster.kernel_id,
          clusterCommand(request)
        );
        await connection.refresh();
        return said;
      },
      askWorkers,
      askAdapt,
      confirmStop,
      confirmRestart,
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
      openPath: path => void app.commands.execute('docmanager:open', { path }),
      confirmEndLeftovers,
      endLeftovers: async processes => {
        const reply = await endLeftovers(processes, app.serviceManager.serverSettings);
        model.setLeftovers(reply);
        return reply;
      }
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
      model.changed.connect((_, what) => {
        const latest = model.lastSnapshot;
        if (what === 'snapshot' && latest) {
          item.take(latest); // the cards' own figures, at their cadence
        }
      });
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

export default plugin;
