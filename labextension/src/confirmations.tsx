/**
 * The questions the panel asks before it does something the user cannot undo: a restart with
 * new settings, and shutting a kernel down. Worded as JupyterLab's own restart
 * dialog is (@jupyterlab/apputils 4.7, sessioncontext: "Restart Kernel?", a warn button).
 */

import * as React from 'react';
import { Dialog, showDialog } from '@jupyterlab/apputils';
import { NotebookPanel } from '@jupyterlab/notebook';
import { TranslationBundle } from '@jupyterlab/translation';

import { settingsRows } from './allocatorSettings';
import { KeyValueRows } from './components/KeyValueRows';
import { elapsedSince, formatBytes } from './format';
import { NotebookAllocatorSettings, ProcessInfo, Units } from './types';

/** Asks before restarting `nb`'s kernel with `s`; true when the user agreed. */
export async function confirmRestart(
  nb: NotebookPanel,
  s: NotebookAllocatorSettings,
  trans: TranslationBundle
): Promise<boolean> {
  const body = (
    <div className="jp-GpuMem-confirm">
      <p>
        {trans.__(
          'Restart the kernel of %1 with these settings? All variables will be lost.',
          nb.context.path.split('/').pop() ?? nb.context.path
        )}
      </p>
      <table className="jp-GpuMem-table jp-GpuMem-kv">
        <KeyValueRows rows={settingsRows(s, trans)} />
      </table>
      <p className="jp-GpuMem-muted">
        {trans.__('They are saved in the notebook and applied at every start of its kernel.')}
      </p>
    </div>
  );
  const result = await showDialog({
    title: trans.__('Restart Kernel with These Settings?'),
    body,
    buttons: [
      Dialog.cancelButton({ label: trans.__('Cancel') }),
      Dialog.warnButton({ label: trans.__('Restart') })
    ]
  });
  return result.button.accept;
}

/** Asks before shutting down the kernel of `p`; true when the user agreed. */
export async function confirmShutdown(
  p: ProcessInfo,
  device: number,
  units: Units,
  trans: TranslationBundle
): Promise<boolean> {
  const name =
    p.notebook_path ?? trans.__('%1 (pid %2)', p.kernel_name ?? trans.__('kernel'), p.pid);
  const idle = elapsedSince(p.last_activity, Date.now());
  const result = await showDialog({
    title: trans.__('Shut Down Kernel?'),
    body: [
      trans.__('Shut down the kernel of %1?', name),
      trans.__('It holds %1 on GPU %2', formatBytes(p.used, units), device) +
        (idle ? trans.__(' and has been idle for %1.', idle) : '.'),
      trans.__('All its variables will be lost.')
    ].join(' '),
    buttons: [
      Dialog.cancelButton({ label: trans.__('Cancel') }),
      Dialog.warnButton({ label: trans.__('Shut Down') })
    ]
  });
  return result.button.accept;
}
