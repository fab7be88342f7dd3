/** The active notebook: its JAX allocator, live, and its allocator settings. */

import * as React from 'react';
import { NotebookPanel } from '@jupyterlab/notebook';
import { TranslationBundle } from '@jupyterlab/translation';
import { UseSignal } from '@jupyterlab/ui-components';

import { EMPTY_SETTINGS } from '../allocatorSettings';
import { notAppliedText } from '../configureCode';
import { ApplyOutcome } from '../kernelStartHook';
import { KernelModel } from '../models/kernelModel';
import { readNotebookSettings } from '../notebookMetadata';
import { NotebookAllocatorSettings, Units } from '../types';
import { KernelStateView } from './KernelStateView';
import { SettingsForm } from './SettingsForm';

export function NotebookSection(props: {
  panel: NotebookPanel;
  kernel: KernelModel;
  units: Units;
  trans: TranslationBundle;
  outcome: ApplyOutcome | undefined;
  onSave: (s: NotebookAllocatorSettings) => void;
  onRestart: (s: NotebookAllocatorSettings) => void;
}): JSX.Element {
  const { trans, kernel } = props;
  const parsed = readNotebookSettings(props.panel);
  return (
    <div className="jp-GpuMem-notebook">
      <h3 className="jp-GpuMem-h">
        {trans.__('This notebook’s JAX allocator')}{' '}
        {/* The name, whole; its folder in the tooltip (a long path broke mid-word here). */}
        <span className="jp-GpuMem-muted jp-GpuMem-path" title={props.panel.context.path}>
          {props.panel.context.path.split('/').pop()}
        </span>
      </h3>
      <UseSignal signal={kernel.changed} initialSender={kernel}>
        {() => (
          <>
            <KernelStateView model={kernel} units={props.units} trans={trans} />
            {props.outcome?.error ? (
              <div className="jp-GpuMem-warning" role="alert">
                {notAppliedText(props.outcome.error, trans)}
              </div>
            ) : null}
            <h3 className="jp-GpuMem-h">{trans.__('Allocator settings for this notebook')}</h3>
            <SettingsForm
              value={parsed.settings ?? EMPTY_SETTINGS}
              problems={parsed.problems}
              snapshot={kernel.lastSnapshot}
              trans={trans}
              onSave={props.onSave}
              onRestart={props.onRestart}
            />
          </>
        )}
      </UseSignal>
    </div>
  );
}
