/**
 * The plugin: puts the GPU memory panel in the left sidebar, hooks kernel starts to apply each
 * notebook's settings, and adds the panel's commands.
 */

import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';
import { ITranslator, nullTranslator, TranslationBundle } from '@jupyterlab/translation';
import { Signal } from '@lumino/signaling';

import { EMPTY_SETTINGS } from './allocatorSettings';
import { confirmRestart, confirmShutdown } from './confirmations';
import { GpuStatusItem } from './components/GpuStatusItem';
import {
  COMMAND_OPEN,
  COMMAND_RESTART_WITH_SETTINGS,
  PANEL_ID,
  PLUGIN_ID,
  TRANSLATION_DOMAIN
} from './constants';
import { gpuMemIcon } from './icon';
import { KernelStartHook } from './kernelStartHook';
import { readNotebookSettings, writeNotebookSettings } from './notebookMetadata';
import { GpuMemPanel } from './panel';
import { panelOptions } from './panelOptions';
import { NotebookAllocatorSettings, PanelOptions } from './types';

function readOptions(settings: ISettingRegistry.ISettings | null): PanelOptions {
  return panelOptions(settings?.get('pollInterval').composite, settings?.get('units').composite);
}

/** Saves the settings into the notebook's metadata and the notebook to disk. */
async function saveSettings(nb: NotebookPanel, s: NotebookAllocatorSettings): Promise<void> {
  writeNotebookSettings(nb, s);
  await nb.context.save();
}

/** Asks as JupyterLab's own restart does, then saves the settings and restarts with them. */
async function restartWith(
  nb: NotebookPanel,
  s: NotebookAllocatorSettings,
  trans: TranslationBundle
): Promise<void> {
  if (!(await confirmRestart(nb, s, trans))) {
    return;
  }
  await saveSettings(nb, s);
  const ctx = nb.sessionContext;
  const kernel = ctx.session?.kernel;
  if (kernel && kernel.status !== 'dead') {
    // An in-place restart (same kernel id, new process); the start hook queues the
    // settings on the restarted kernel before any cell.
    await ctx.restartKernel();
    return;
  }
  // No kernel, or a dead one that cannot restart: start one of the same kind.
  const name = kernel?.name ?? ctx.kernelPreference.name;
  await ctx.changeKernel(name ? { name } : {});
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description:
    'A sidebar panel: every GPU, which kernel holds how much, and this notebook’s JAX allocator.',
  autoStart: true,
  requires: [INotebookTracker],
  optional: [ISettingRegistry, ITranslator, IStatusBar],
  activate: async (
    app: JupyterFrontEnd,
    tracker: INotebookTracker,
    registry: ISettingRegistry | null,
    translator: ITranslator | null,
    statusBar: IStatusBar | null
  ) => {
    const trans = (translator ?? nullTranslator).load(TRANSLATION_DOMAIN);
    const hook = new KernelStartHook();
    tracker.forEach(nb => hook.watch(nb));
    tracker.widgetAdded.connect((_, nb) => hook.watch(nb));

    let statusItem: GpuStatusItem | null = null;
    const widget = new GpuMemPanel({
      options: readOptions(null),
      trans,
      outcome: nb => hook.outcome(nb),
      alsoWatched: () => !!statusItem?.isVisible,
      actions: {
        onOpen: path => void app.commands.execute('docmanager:open', { path }),
        onSave: (nb, s) => {
          void saveSettings(nb, s).then(() => widget.update());
        },
        onRestart: (nb, s) => void restartWith(nb, s, trans),
        onFix: (nb, fraction) => {
          const current = readNotebookSettings(nb).settings ?? EMPTY_SETTINGS;
          void restartWith(nb, { ...current, fraction }, trans);
        },
        onShutdown: (p, device) => {
          void confirmShutdown(p, device, widget.options.units, trans).then(async ok => {
            if (ok && p.kernel_id) {
              await app.serviceManager.kernels.shutdown(p.kernel_id);
              widget.devices.refresh();
            }
          });
        }
      }
    });
    widget.id = PANEL_ID;
    widget.title.icon = gpuMemIcon;
    widget.title.caption = trans.__('GPU memory');
    app.shell.add(widget, 'left', { rank: 900 });

    widget.notebook = tracker.currentWidget;
    tracker.currentChanged.connect((_, nb) => {
      widget.notebook = nb;
    });
    tracker.widgetAdded.connect((_, nb) => {
      nb.context.ready.then(() => {
        nb.context.model.metadataChanged.connect(() => widget.update());
      });
    });
    hook.applied.connect(() => widget.update());

    if (statusBar) {
      const item = new GpuStatusItem({
        devices: widget.devices,
        kernel: widget.kernel,
        units: () => widget.options.units,
        trans,
        onClick: () => void app.commands.execute(COMMAND_OPEN)
      });
      statusItem = item;
      const activeChanged = new Signal<GpuStatusItem, void>(item);
      tracker.currentChanged.connect(() => activeChanged.emit());
      statusBar.registerStatusItem(`${PLUGIN_ID}:status`, {
        item,
        align: 'left',
        rank: 4,
        isActive: () => !!tracker.currentWidget,
        activeStateChanged: activeChanged
      });
    }

    app.commands.addCommand(COMMAND_OPEN, {
      label: trans.__('Show GPU memory'),
      icon: gpuMemIcon,
      execute: () => app.shell.activateById(PANEL_ID)
    });
    app.commands.addCommand(COMMAND_RESTART_WITH_SETTINGS, {
      label: trans.__('Restart kernel with this notebook’s GPU memory settings'),
      isEnabled: () => !!tracker.currentWidget,
      execute: () => {
        const nb = tracker.currentWidget;
        if (nb) {
          const s = readNotebookSettings(nb).settings ?? EMPTY_SETTINGS;
          return restartWith(nb, s, trans);
        }
      }
    });

    if (registry) {
      try {
        const settings = await registry.load(PLUGIN_ID);
        widget.options = readOptions(settings);
        settings.changed.connect(() => {
          widget.options = readOptions(settings);
        });
      } catch (reason) {
        console.warn('jupyter-gpumem: settings not loaded, using defaults', reason);
      }
    }
  }
};

export default plugin;
