/** One GPU: name, total, utilisation and who holds its memory; or why it cannot be read. */

import * as React from 'react';
import { TranslationBundle } from '@jupyterlab/translation';

import { memoryShares } from '../deviceInfo';
import { formatBytes } from '../format';
import { DeviceInfo, ReadableDevice, Units, UnreadableDevice } from '../types';
import { MemoryBar } from './MemoryBar';

export function DeviceCard(props: {
  device: DeviceInfo;
  units: Units;
  trans: TranslationBundle;
}): JSX.Element {
  const d = props.device;
  return d.readable ? (
    <ReadableCard device={d} units={props.units} trans={props.trans} />
  ) : (
    <UnreadableCard device={d} trans={props.trans} />
  );
}

/** No byte counts at all: an unreadable GPU's memory is unknown, not zero. */
function UnreadableCard(props: {
  device: UnreadableDevice;
  trans: TranslationBundle;
}): JSX.Element {
  const { device: d, trans } = props;
  return (
    <div className="jp-GpuMem-card" data-device={d.index} data-readable="false">
      <div className="jp-GpuMem-cardHead">
        {d.name ? trans.__('GPU %1 · %2', d.index, d.name) : trans.__('GPU %1', d.index)}
      </div>
      <div className="jp-GpuMem-muted">
        {trans.__('Cannot be read: %1', d.reason ?? trans.__('no reason given'))}
      </div>
    </div>
  );
}

function ReadableCard(props: {
  device: ReadableDevice;
  units: Units;
  trans: TranslationBundle;
}): JSX.Element {
  const { device: d, units, trans } = props;
  const shares = memoryShares(d);
  return (
    <div className="jp-GpuMem-card" data-device={d.index}>
      <div className="jp-GpuMem-cardHead">
        <span>{trans.__('GPU %1 · %2', d.index, d.name)}</span>
        <span className="jp-GpuMem-muted">
          {trans.__('%1 / %2', formatBytes(d.used, units), formatBytes(d.total, units))}
          {d.utilization !== null ? trans.__(' · %1% busy', d.utilization) : ''}
        </span>
      </div>
      <MemoryBar
        total={d.total}
        units={units}
        ariaLabel={trans.__('memory use')}
        segments={[
          { key: 'mine', label: trans.__('this notebook'), bytes: shares.thisNotebook },
          { key: 'kernels', label: trans.__('other kernels'), bytes: shares.otherKernels },
          // Only in a container, where NVML's host pids cannot be told apart from the kernels.
          ...(shares.hostPids > 0
            ? [{ key: 'hostpids', label: trans.__('host pids, kernels or not'), bytes: shares.hostPids }]
            : []),
          { key: 'other', label: trans.__('other processes'), bytes: shares.otherProcesses },
          { key: 'free', label: trans.__('free'), bytes: shares.free }
        ]}
      />
      {!d.pids_visible ? (
        <div className="jp-GpuMem-muted">
          {trans.__(
            'Processes are not visible: %1',
            d.pids_reason ?? trans.__('no reason given')
          )}
        </div>
      ) : null}
    </div>
  );
}
