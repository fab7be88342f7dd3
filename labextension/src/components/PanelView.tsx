import * as React from 'react';
import { NotebookPanel } from '@jupyterlab/notebook';

import { fetchDevices } from '../api';
import { ApplyOutcome } from '../notebookSettings';
import { NotebookAllocatorSettings, PanelOptions } from '../types';
import { usePoll } from '../usePoll';
import { DevicesSection } from './DevicesSection';
import { NotebookSection } from './NotebookSection';

export interface PanelViewProps {
  visible: boolean;
  options: PanelOptions;
  notebook: NotebookPanel | null;
  outcome: ApplyOutcome | undefined;
  onOpen: (path: string) => void;
  onSave: (panel: NotebookPanel, s: NotebookAllocatorSettings) => void;
  onRestart: (panel: NotebookPanel, s: NotebookAllocatorSettings) => void;
  onFix: (panel: NotebookPanel, fraction: number) => void;
}

/** The whole sidebar: devices and kernels, then the active notebook. */
export function PanelView(props: PanelViewProps): JSX.Element {
  const nb = props.notebook;
  const path = nb ? nb.context.path : null;
  const intervalMs = Math.round(props.options.pollSeconds * 1000);
  const devices = usePoll(
    () => fetchDevices(path),
    intervalMs,
    props.visible,
    path ?? ''
  );
  return (
    <div className="jp-GpuMem-panel">
      <h2 className="jp-GpuMem-title">GPU memory</h2>
      <DevicesSection
        reply={devices.value}
        error={devices.error}
        activePath={path}
        units={props.options.units}
        canFix={!!nb}
        onOpen={props.onOpen}
        onFix={f => nb && props.onFix(nb, f)}
      />
      {nb ? (
        <NotebookSection
          key={nb.id}
          panel={nb}
          visible={props.visible}
          intervalMs={intervalMs}
          units={props.options.units}
          outcome={props.outcome}
          onSave={s => props.onSave(nb, s)}
          onRestart={s => props.onRestart(nb, s)}
        />
      ) : (
        <div className="jp-GpuMem-muted jp-GpuMem-notebook">
          Open a notebook to see its JAX allocator and settings.
        </div>
      )}
    </div>
  );
}
