/** Every GPU the server sees, who holds its memory, and over-commit warnings. */

import * as React from 'react';
import { TranslationBundle } from '@jupyterlab/translation';
import { UseSignal } from '@jupyterlab/ui-components';

import { ApiError } from '../api';
import { hostPidsNotes } from '../deviceInfo';
import { overviewRows, showsOverview } from '../deviceOverview';
import { DevicesModel } from '../models/devicesModel';
import { DevicesReply, NvmlState, ProcessInfo, Units } from '../types';
import { DeviceCard } from './DeviceCard';
import { DeviceOverview } from './DeviceOverview';
import { HostPidsNote } from './HostPidsNote';
import { KernelTable } from './KernelTable';
import { StateNotice } from './StateNotice';
import { WarningList } from './WarningList';

function stateTitle(state: NvmlState, trans: TranslationBundle): string {
  switch (state) {
    case 'no_library':
      return trans.__('NVML is not available');
    case 'no_driver':
      return trans.__('No GPU here');
    case 'no_permission':
      return trans.__('Not allowed to read the GPUs');
    default:
      return trans.__('The GPUs could not be read');
  }
}

/** A failed request in words. */
function errorText(error: Error, trans: TranslationBundle): string {
  if (!(error instanceof ApiError)) {
    return error.message;
  }
  const f = error.failure;
  switch (f.kind) {
    case 'unreachable':
      return trans.__('The Jupyter server cannot be reached (%1).', f.detail);
    case 'not-enabled':
      return trans.__('The jupyter-gpumem server extension is not enabled on this server.');
    case 'error-answer':
      return trans.__('The server answered %1: %2', f.status, f.detail);
  }
}

interface Props {
  model: DevicesModel;
  activePath: string | null;
  units: Units;
  trans: TranslationBundle;
  canFix: boolean;
  onOpen: (path: string) => void;
  onFix: (fraction: number) => void;
  onShutdown: (p: ProcessInfo, device: number) => void;
}

export function DevicesSection(props: Props): JSX.Element {
  return (
    <UseSignal signal={props.model.changed} initialSender={props.model}>
      {() => <DevicesView {...props} reply={props.model.reply} error={props.model.error} />}
    </UseSignal>
  );
}

function DevicesView(
  props: Props & { reply: DevicesReply | null; error: Error | null }
): JSX.Element {
  const { reply, error, trans } = props;
  const node = React.useRef<HTMLDivElement>(null);
  const [picked, setPicked] = React.useState<number | null>(null);
  const showCard = (index: number) => {
    setPicked(index);
    node.current
      ?.querySelector(`.jp-GpuMem-card[data-device="${index}"]`)
      ?.scrollIntoView({ block: 'start', behavior: 'smooth' });
  };
  if (error && !reply) {
    return (
      <StateNotice
        title={trans.__('The server is unreachable')}
        detail={trans.__('%1 The panel keeps trying.', errorText(error, trans))}
        kind="warn"
      />
    );
  }
  if (!reply) {
    return <div className="jp-GpuMem-muted">{trans.__('Reading the GPUs…')}</div>;
  }
  return (
    <div className="jp-GpuMem-devices" ref={node}>
      <div className="jp-GpuMem-sourceLine">
        {reply.source === 'replay' ? (
          <span className="jp-GpuMem-badge" data-badge="replay">
            {trans.__('replay')}
          </span>
        ) : null}
        {reply.synthetic ? (
          <span className="jp-GpuMem-badge" data-badge="synthetic">
            {trans.__('synthetic')}
          </span>
        ) : null}
        {error ? (
          <span className="jp-GpuMem-muted">
            {trans.__(
              'Last update failed (%1); showing the previous reading.',
              errorText(error, trans)
            )}
          </span>
        ) : null}
      </div>
      {reply.state !== 'ok' ? (
        <StateNotice title={stateTitle(reply.state, trans)} detail={reply.reason} />
      ) : reply.devices.length === 0 ? (
        <StateNotice
          title={trans.__('No GPU here')}
          detail={trans.__('NVML works but lists no device.')}
        />
      ) : (
        <>
          <WarningList
            warnings={reply.warnings}
            canFix={props.canFix}
            onFix={props.onFix}
            trans={trans}
          />
          {showsOverview(reply.devices.length) ? (
            <DeviceOverview
              rows={overviewRows(reply.devices, props.activePath !== null)}
              units={props.units}
              trans={trans}
              onSelect={showCard}
            />
          ) : null}
          {hostPidsNotes(reply.devices).map(note => (
            <HostPidsNote key={note.gpus.join(',')} note={note} trans={trans} />
          ))}
          {reply.devices.map(d => (
            <DeviceCard
              key={d.index}
              device={d}
              units={props.units}
              trans={trans}
              notebookOpen={props.activePath !== null}
              picked={picked === d.index}
            />
          ))}
          <h3 className="jp-GpuMem-h">{trans.__('Kernels on the GPU')}</h3>
          <KernelTable
            devices={reply.devices}
            serverOffsetMs={props.model.serverOffsetMs}
            activePath={props.activePath}
            units={props.units}
            trans={trans}
            onOpen={props.onOpen}
            onShutdown={props.onShutdown}
            offerShutdown={reply.source !== 'replay'}
          />
        </>
      )}
    </div>
  );
}
