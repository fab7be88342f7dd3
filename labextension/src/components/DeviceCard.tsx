import * as React from 'react';

import { formatBytes } from '../format';
import { DeviceInfo, Units } from '../types';
import { MemoryBar } from './MemoryBar';

/** One GPU: name, total, utilisation and who holds its memory. */
export function DeviceCard(props: {
  device: DeviceInfo;
  units: Units;
}): JSX.Element {
  const d = props.device;
  if (!d.readable) {
    return (
      <div className="jp-GpuMem-card" data-device={d.index}>
        <div className="jp-GpuMem-cardHead">
          GPU {d.index}
          {d.name ? ` · ${d.name}` : ''}
        </div>
        <div className="jp-GpuMem-muted">
          Cannot be read: {d.reason ?? 'no reason given'}
        </div>
      </div>
    );
  }
  const mine = Math.max(d.this_kernel_bytes, 0);
  const otherKernels = Math.max(d.kernels_bytes - mine, 0);
  // Memory NVML counts as used but no visible process holds goes with "other processes".
  const others = Math.max(d.used - mine - otherKernels, 0);
  return (
    <div className="jp-GpuMem-card" data-device={d.index}>
      <div className="jp-GpuMem-cardHead">
        <span>
          GPU {d.index} · {d.name}
        </span>
        <span className="jp-GpuMem-muted">
          {formatBytes(d.used, props.units)} / {formatBytes(d.total, props.units)}
          {d.utilization !== null ? ` · ${d.utilization}% busy` : ''}
        </span>
      </div>
      <MemoryBar
        total={d.total}
        units={props.units}
        segments={[
          { key: 'mine', label: 'this notebook', bytes: mine },
          { key: 'kernels', label: 'other kernels', bytes: otherKernels },
          { key: 'other', label: 'other processes', bytes: others },
          { key: 'free', label: 'free', bytes: d.free }
        ]}
      />
      {!d.pids_visible ? (
        <div className="jp-GpuMem-muted">
          Processes are not visible: {d.pids_reason ?? 'no reason given'}
        </div>
      ) : null}
    </div>
  );
}
