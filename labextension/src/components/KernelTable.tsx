import * as React from 'react';

import { formatBytes } from '../format';
import { DeviceInfo, ProcessInfo, Units } from '../types';

interface Row {
  device: number;
  process: ProcessInfo;
}

function preallocText(p: boolean | null): string {
  return p === null ? 'unknown' : p ? 'yes' : 'no';
}

/** Every kernel on every GPU, with its notebook linked. */
export function KernelTable(props: {
  devices: DeviceInfo[];
  activePath: string | null;
  units: Units;
  onOpen: (path: string) => void;
}): JSX.Element {
  const rows: Row[] = [];
  for (const d of props.devices) {
    for (const p of d.processes) {
      if (p.kind === 'kernel') {
        rows.push({ device: d.index, process: p });
      }
    }
  }
  if (rows.length === 0) {
    return <div className="jp-GpuMem-muted">No kernel holds GPU memory.</div>;
  }
  return (
    <div className="jp-GpuMem-scrollX">
      <table className="jp-GpuMem-table">
        <thead>
          <tr>
            <th>Notebook</th>
            <th>GPU</th>
            <th>Memory</th>
            <th title="Whether the kernel preallocated its pool">Prealloc</th>
          </tr>
        </thead>
        <tbody>
          {rows.map(({ device, process: p }) => {
            const mine = !!p.notebook_path && p.notebook_path === props.activePath;
            return (
              <tr
                key={`${device}-${p.pid}`}
                className={mine ? 'jp-GpuMem-thisKernel' : ''}
                data-pid={p.pid}
              >
                <td>
                  {p.notebook_path ? (
                    <a
                      href="#"
                      title={`Open ${p.notebook_path}`}
                      onClick={e => {
                        e.preventDefault();
                        props.onOpen(p.notebook_path as string);
                      }}
                    >
                      {p.notebook_path.split('/').pop()}
                    </a>
                  ) : (
                    <span className="jp-GpuMem-muted">
                      {p.kernel_name ?? 'kernel'} (pid {p.pid})
                    </span>
                  )}
                  {mine ? <span className="jp-GpuMem-tag">this notebook</span> : null}
                  {p.replay_placeholder_pid !== undefined ? (
                    <span
                      className="jp-GpuMem-tag"
                      title={`Replay: this live kernel stands in for pid ${p.replay_placeholder_pid} of the trace`}
                    >
                      replay
                    </span>
                  ) : null}
                  {p.execution_state === 'dead' ? (
                    <span className="jp-GpuMem-tag">dead</span>
                  ) : null}
                </td>
                <td>{device}</td>
                <td>{formatBytes(p.used, props.units)}</td>
                <td>{preallocText(p.preallocated)}</td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </div>
  );
}
