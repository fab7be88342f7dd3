import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';

import {
  COMMAND_OPEN,
  COMMAND_RESTART_WITH_SETTINGS,
  DEFAULT_POLL_SECONDS,
  MIN_POLL_SECONDS,
  PANEL_ID,
  PLUGIN_ID
} from './constants';
import { gpuMemIcon } from './icon';
import {
  EMPTY_SETTINGS,
  KernelStartHook,
  readNotebookSettings,
  writeNotebookSettings
} from './notebookSettings';
import { GpuMemPanel } from './panel';
import { NotebookAllocatorSettings, PanelOptions } from './types';

function readOptions(settings: ISettingRegistry.ISettings | null): PanelOptions {
  const poll = settings?.get('pollInterval').composite as number | undefined;
  const units = settings?.get('units').composite as string | undefined;
  return {
    pollSeconds: Math.max(poll ?? DEFAULT_POLL_SECONDS, MIN_POLL_SECONDS),
    units: units === 'decimal' ? 'decimal' : 'binary'
  };
}

async function restartWith(
  nb: NotebookPanel,
  s: NotebookAllocatorSettings
): Promise<void> {
  writeNotebookSettings(nb, s);
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
  optional: [ISettingRegistry],
  activate: async (
    app: JupyterFrontEnd,
    tracker: INotebookTracker,
    registry: ISettingRegistry | null
  ) => {
    const hook = new KernelStartHook();
    tracker.forEach(nb => hook.watch(nb));
    tracker.widgetAdded.connect((_, nb) => hook.watch(nb));

    let options = readOptions(null);
    const widget = new GpuMemPanel(() => {
      const nb = tracker.currentWidget;
      return {
        options,
        notebook: nb,
        outcome: nb ? hook.outcome(nb) : undefined,
        onOpen: path => void app.commands.execute('docmanager:open', { path }),
        onSave: (panel, s) => {
          writeNotebookSettings(panel, s);
          widget.update();
        },
        onRestart: (panel, s) => void restartWith(panel, s),
        onFix: (panel, fraction) => {
          const current = readNotebookSettings(panel).settings ?? EMPTY_SETTINGS;
          void restartWith(panel, { ...current, fraction });
        }
      };
    });
    widget.id = PANEL_ID;
    widget.title.icon = gpuMemIcon;
    widget.title.caption = 'GPU memory';
    app.shell.add(widget, 'left', { rank: 900 });

    tracker.currentChanged.connect(() => widget.update());
    tracker.widgetAdded.connect((_, nb) => {
      nb.context.ready.then(() => {
        nb.context.model.metadataChanged.connect(() => widget.update());
      });
    });
    hook.applied.connect(() => widget.update());

    app.commands.addCommand(COMMAND_OPEN, {
      label: 'Show GPU memory',
      icon: gpuMemIcon,
      execute: () => app.shell.activateById(PANEL_ID)
    });
    app.commands.addCommand(COMMAND_RESTART_WITH_SETTINGS, {
      label: 'Restart kernel with this notebook’s GPU memory settings',
      isEnabled: () => !!tracker.currentWidget,
      execute: () => {
        const nb = tracker.currentWidget;
        if (nb) {
          const s = readNotebookSettings(nb).settings ?? EMPTY_SETTINGS;
          return restartWith(nb, s);
        }
      }
    });

    if (registry) {
      try {
        const settings = await registry.load(PLUGIN_ID);
        options = readOptions(settings);
        settings.changed.connect(() => {
          options = readOptions(settings);
          widget.update();
        });
        widget.update();
      } catch (reason) {
        console.warn('jupyter-gpumem: settings not loaded, using defaults', reason);
      }
    }
  }
};

export default plugin;
