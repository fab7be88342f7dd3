/**
 * Applies each notebook's metadata settings at every kernel start and restart, before any user
 * cell: the execute request is queued on the new kernel connection first.
 */

import { ISessionContext } from '@jupyterlab/apputils';
import { NotebookPanel } from '@jupyterlab/notebook';
import { Kernel } from '@jupyterlab/services';
import { ISignal, Signal } from '@lumino/signaling';

import { hasAnySetting } from './allocatorSettings';
import { configureCode } from './configureCode';
import { readNotebookSettings } from './notebookMetadata';
import { asExecutionError, executeSilently } from './silentExecution';
import { ExecutionError } from './types';

/** What happened the last time settings were applied to a notebook's kernel. */
export interface ApplyOutcome {
  error: ExecutionError | null;
}

type KernelChange = {
  oldValue: Kernel.IKernelConnection | null;
  newValue: Kernel.IKernelConnection | null;
};

export class KernelStartHook {
  private _outcomes = new Map<string, ApplyOutcome>();
  private _applied = new Signal<this, ApplyOutcome>(this);

  /** Emitted after each attempt, successful or not. */
  get applied(): ISignal<this, ApplyOutcome> {
    return this._applied;
  }

  outcome(panel: NotebookPanel): ApplyOutcome | undefined {
    return this._outcomes.get(panel.id);
  }

  watch(panel: NotebookPanel): void {
    const ctx = panel.sessionContext;
    const pendingAuto = new Set<Kernel.IKernelConnection>();
    const onStatus = (kernel: Kernel.IKernelConnection, status: Kernel.Status) => {
      if (status === 'restarting') {
        // restart() clears queued messages right after this signal; queue after it.
        void Promise.resolve().then(() => this._apply(panel, kernel));
      } else if (status === 'autorestarting') {
        pendingAuto.add(kernel);
      }
    };
    const onConnection = (kernel: Kernel.IKernelConnection, status: Kernel.ConnectionStatus) => {
      if (status === 'connected' && pendingAuto.has(kernel)) {
        pendingAuto.delete(kernel);
        void this._apply(panel, kernel);
      }
    };
    const attach = (kernel: Kernel.IKernelConnection | null) => {
      if (!kernel) {
        return;
      }
      kernel.statusChanged.connect(onStatus);
      kernel.connectionStatusChanged.connect(onConnection);
      void this._apply(panel, kernel);
    };
    ctx.kernelChanged.connect((_: ISessionContext, change: KernelChange) => {
      if (change.oldValue === change.newValue) {
        // restartKernel() reports the same connection as changed; the restart was hooked.
        return;
      }
      if (change.oldValue) {
        change.oldValue.statusChanged.disconnect(onStatus);
        change.oldValue.connectionStatusChanged.disconnect(onConnection);
      }
      attach(change.newValue);
    });
    attach(ctx.session?.kernel ?? null);
    panel.disposed.connect(() => this._outcomes.delete(panel.id));
  }

  private async _apply(panel: NotebookPanel, kernel: Kernel.IKernelConnection): Promise<void> {
    // The model may still be loading when the kernel starts with the document.
    await panel.context.ready;
    const { settings } = readNotebookSettings(panel);
    let error: ExecutionError | null = null;
    if (settings && hasAnySetting(settings)) {
      try {
        error = await executeSilently(kernel, configureCode(settings));
      } catch (e) {
        error = asExecutionError(e);
      }
    }
    const outcome = { error };
    this._outcomes.set(panel.id, outcome);
    this._applied.emit(outcome);
  }
}
