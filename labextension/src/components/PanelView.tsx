/** The whole sidebar: devices and kernels, then the active notebook. */

import * as React from 'react';
import { NotebookPanel } from '@jupyterlab/notebook';
import { TranslationBundle } from '@jupyterlab/translation';

import { ApplyOutcome } from '../kernelStartHook';
import { DevicesModel } from '../models/devicesModel';
import { KernelModel } from '../models/kernelModel';
import { NotebookAllocatorSettings, ProcessInfo, Units } from '../types';
import { DevicesSection } from './DevicesSection';
import { NotebookSection } from './NotebookSection';

/** What the panel's buttons and links do; index.ts provides them. */
export interface PanelActions {
  onOpen: (path: string) => void;
  onSave: (panel: NotebookPanel, s: NotebookAllocatorSettings) => void;
  onRestart: (panel: NotebookPanel, s: NotebookAllocatorSettings) => void;
  onFix: (panel: NotebookPanel, fraction: number) => void;
  /** Asks, then shuts down an idle kernel that holds GPU memory; then the devices are read again. */
  onShutdown: (p: ProcessInfo, device: number) => void;
}

export function PanelView(props: {
  devices: DevicesModel;
  kernel: KernelModel;
  notebook: NotebookPanel | null;
  outcome: ApplyOutcome | undefined;
  units: Units;
  trans: TranslationBundle;
  actions: PanelActions;
}): JSX.Element {
  const { notebook: nb, trans, actions } = props;
  return (
    <div className="jp-GpuMem-panel">
      <h2 className="jp-GpuMem-title">{trans.__('GPU memory')}</h2>
      <DevicesSection
        model={props.devices}
        activePath={nb ? nb.context.path : null}
        units={props.units}
        trans={trans}
        canFix={!!nb}
        onOpen={actions.onOpen}
        onFix={f => nb && actions.onFix(nb, f)}
        onShutdown={actions.onShutdown}
      />
      {nb ? (
        <NotebookSection
          key={nb.id}
          panel={nb}
          kernel={props.kernel}
          units={props.units}
          trans={trans}
          outcome={props.outcome}
          onSave={s => actions.onSave(nb, s)}
          onRestart={s => actions.onRestart(nb, s)}
        />
      ) : (
        <div className="jp-GpuMem-muted jp-GpuMem-notebook">
          {trans.__('Open a notebook to see its JAX allocator and settings.')}
        </div>
      )}
    </div>
  );
}
