import * as React from 'react';

import { DevicesReply, Units } from '../types';
import { DeviceCard } from './DeviceCard';
import { KernelTable } from './KernelTable';
import { StateNotice } from './StateNotice';
import { WarningList } from './WarningList';

const STATE_TITLES: Record<string, string> = {
  no_library: 'NVML is not available',
  no_driver: 'No GPU here',
  no_permission: 'Not allowed to read the GPUs',
  error: 'The GPUs could not be read'
};

/** Every GPU the server sees, who holds its memory, and over-commit warnings. */
export function DevicesSection(props: {
  reply: DevicesReply | null;
  error: Error | null;
  activePath: string | null;
  units: Units;
  canFix: boolean;
  onOpen: (path: string) => void;
  onFix: (fraction: number) => void;
}): JSX.Element {
  const { reply, error } = props;
  if (error && !reply) {
    return (
      <StateNotice
        title="The server is unreachable"
        detail={`${error.message} The panel keeps trying.`}
        kind="warn"
      />
    );
  }
  if (!reply) {
    return <div className="jp-GpuMem-muted">Reading the GPUs…</div>;
  }
  return (
    <div className="jp-GpuMem-devices">
      <div className="jp-GpuMem-sourceLine">
        {reply.source === 'replay' ? (
          <span className="jp-GpuMem-badge" data-badge="replay">replay</span>
        ) : null}
        {reply.synthetic ? (
          <span className="jp-GpuMem-badge" data-badge="synthetic">synthetic</span>
        ) : null}
        {error ? (
          <span className="jp-GpuMem-muted">
            Last update failed ({error.message}); showing the previous reading.
          </span>
        ) : null}
      </div>
      {reply.state !== 'ok' ? (
        <StateNotice
          title={STATE_TITLES[reply.state] ?? 'The GPUs could not be read'}
          detail={reply.reason}
        />
      ) : reply.devices.length === 0 ? (
        <StateNotice title="No GPU here" detail="NVML works but lists no device." />
      ) : (
        <>
          <WarningList warnings={reply.warnings} canFix={props.canFix} onFix={props.onFix} />
          {reply.devices.map(d => (
            <DeviceCard key={d.index} device={d} units={props.units} />
          ))}
          <h3 className="jp-GpuMem-h">Kernels on the GPU</h3>
          <KernelTable
            devices={reply.devices}
            activePath={props.activePath}
            units={props.units}
            onOpen={props.onOpen}
          />
        </>
      )}
    </div>
  );
}
