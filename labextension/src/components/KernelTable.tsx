/** Every kernel on every GPU, with its notebook linked. */

import * as React from 'react';
import { TranslationBundle } from '@jupyterlab/translation';

import { canShutDown, kernelRows } from '../deviceInfo';
import { elapsedSince, formatBytes, namePieces } from '../format';
import { DeviceInfo, ProcessInfo, Units } from '../types';

function preallocText(p: boolean | null, trans: TranslationBundle): string {
  return p === null ? trans.__('unknown') : p ? trans.__('yes') : trans.__('no');
}

export function KernelTable(props: {
  devices: DeviceInfo[];
  activePath: string | null;
  units: Units;
  trans: TranslationBundle;
  onOpen: (path: string) => void;
  /** Asks, then shuts the kernel down. */
  onShutdown: (p: ProcessInfo, device: number) => void;
  /** False in a replay: the memory is the trace's, not the kernel's. */
  offerShutdown: boolean;
}): JSX.Element {
  const { trans } = props;
  const rows = kernelRows(props.devices);
  const now = Date.now();
  if (rows.length === 0) {
    return <div className="jp-GpuMem-muted">{trans.__('No kernel holds GPU memory.')}</div>;
  }
  return (
    <div className="jp-GpuMem-scrollX">
      <table className="jp-GpuMem-table jp-GpuMem-kernels">
        <thead>
          <tr>
            <th>{trans.__('Notebook')}</th>
            <th>{trans.__('GPU')}</th>
            <th>{trans.__('Memory')}</th>
            <th title={trans.__('Whether the kernel preallocated its pool')}>
              {trans.__('Prealloc')}
            </th>
          </tr>
        </thead>
        <tbody>
          {rows.map(({ device, process: p }) => {
            const mine = !!p.notebook_path && p.notebook_path === props.activePath;
            const idle = p.execution_state === 'idle' ? elapsedSince(p.last_activity, now) : null;
            const shutdown = props.offerShutdown && canShutDown(p);
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
                      title={trans.__('Open %1', p.notebook_path)}
                      onClick={e => {
                        e.preventDefault();
                        props.onOpen(p.notebook_path as string);
                      }}
                    >
                      {namePieces(p.notebook_path.split('/').pop() as string).map((piece, i) => (
                        <React.Fragment key={i}>
                          {i > 0 ? <wbr /> : null}
                          {piece}
                        </React.Fragment>
                      ))}
                    </a>
                  ) : (
                    <span className="jp-GpuMem-muted">
                      {trans.__('%1 (pid %2)', p.kernel_name ?? trans.__('kernel'), p.pid)}
                    </span>
                  )}
                  {mine ? (
                    <span className="jp-GpuMem-tag">{trans.__('this notebook')}</span>
                  ) : null}
                  {p.replay_placeholder_pid !== undefined ? (
                    <span
                      className="jp-GpuMem-tag"
                      title={trans.__(
                        'Replay: this live kernel stands in for pid %1 of the trace',
                        p.replay_placeholder_pid
                      )}
                    >
                      {trans.__('replay')}
                    </span>
                  ) : null}
                  {p.execution_state === 'dead' ? (
                    <span className="jp-GpuMem-tag">{trans.__('dead')}</span>
                  ) : null}
                  {idle !== null || shutdown ? (
                    <span className="jp-GpuMem-idle">
                      {idle !== null ? trans.__('idle %1', idle) : trans.__('idle')}
                      {shutdown ? (
                        <button
                          className="jp-mod-styled jp-GpuMem-shutdown"
                          title={trans.__('Shut this kernel down and give its GPU memory back')}
                          onClick={() => props.onShutdown(p, device)}
                        >
                          {trans.__('Shut down')}
                        </button>
                      ) : null}
                    </span>
                  ) : null}
                </td>
                <td>{device}</td>
                <td>{formatBytes(p.used, props.units)}</td>
                <td>{preallocText(p.preallocated, trans)}</td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </div>
  );
}
