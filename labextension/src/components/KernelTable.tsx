/** Every kernel on every GPU, with its notebook linked. */

import * as React from 'react';
import { TranslationBundle } from '@jupyterlab/translation';

import { canShutDown, kernelRows } from '../deviceInfo';
import { elapsedSince, formatBytes } from '../format';
import { badgeText } from '../cullNotices';
import { DeviceInfo, PendingCull, ProcessInfo, Units } from '../types';

function preallocText(p: boolean | null, trans: TranslationBundle): string {
  return p === null ? trans.__('unknown') : p ? trans.__('yes') : trans.__('no');
}

/**
 * "idle 14 s" that counts up on its own, once a second: the server pushes a reading only when it
 * changes, so a table drawn from readings alone would stop at the time it was drawn.
 */
function IdleFor(props: {
  since: string | null | undefined;
  trans: TranslationBundle;
}): JSX.Element {
  const [now, setNow] = React.useState(() => Date.now());
  React.useEffect(() => {
    const timer = window.setInterval(() => setNow(Date.now()), 1000);
    return () => window.clearInterval(timer);
  }, []);
  const idle = elapsedSince(props.since, now);
  return <>{idle !== null ? props.trans.__('idle %1', idle) : props.trans.__('idle')}</>;
}

/** "shut down in 42 s": the server's pending cull of this kernel, counting down on its own. */
function CullBadge(props: {
  pending: PendingCull;
  serverOffsetMs: number;
  trans: TranslationBundle;
}): JSX.Element {
  const [now, setNow] = React.useState(() => Date.now());
  React.useEffect(() => {
    const timer = window.setInterval(() => setNow(Date.now()), 1000);
    return () => window.clearInterval(timer);
  }, []);
  const { pending, trans } = props;
  return (
    <span
      className="jp-GpuMem-tag jp-GpuMem-cullBadge"
      title={trans.__(
        'The server shuts this kernel down if it stays idle: %1. Run a cell, or keep it running from the notification.',
        pending.message
      )}
    >
      {badgeText(pending, (now + props.serverOffsetMs) / 1000, trans)}
    </span>
  );
}

export function KernelTable(props: {
  devices: DeviceInfo[];
  /** Add to the page's clock to read the server's (pending culls count down on it). */
  serverOffsetMs: number;
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
  if (rows.length === 0) {
    return <div className="jp-GpuMem-muted">{trans.__('No kernel holds GPU memory.')}</div>;
  }
  // Two columns at the sidebar's default width: the notebook's name on one line (cut with an
  // ellipsis, whole in its tooltip), its GPU and what is known of its kernel on a line below.
  return (
    <div className="jp-GpuMem-scrollX">
      <table className="jp-GpuMem-table jp-GpuMem-kernels">
        <thead>
          <tr>
            <th>{trans.__('Notebook')}</th>
            <th>{trans.__('Memory')}</th>
          </tr>
        </thead>
        <tbody>
          {rows.map(({ device, process: p }) => {
            const mine = !!p.notebook_path && p.notebook_path === props.activePath;
            const idle = p.execution_state === 'idle';
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
                      className="jp-GpuMem-kernelName"
                      title={trans.__('Open %1', p.notebook_path)}
                      onClick={e => {
                        e.preventDefault();
                        props.onOpen(p.notebook_path as string);
                      }}
                    >
                      {p.notebook_path.split('/').pop() as string}
                    </a>
                  ) : (
                    <span className="jp-GpuMem-kernelName jp-GpuMem-muted">
                      {trans.__('%1 (pid %2)', p.kernel_name ?? trans.__('kernel'), p.pid)}
                    </span>
                  )}
                  <span className="jp-GpuMem-kernelDetail">
                    <span className="jp-GpuMem-kernelGpu">{trans.__('GPU %1', device)}</span>
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
                    <span
                      className="jp-GpuMem-prealloc"
                      title={trans.__('Whether the kernel preallocated its pool')}
                    >
                      {trans.__('prealloc %1', preallocText(p.preallocated, trans))}
                    </span>
                    {p.pending_cull ? (
                      <CullBadge
                        pending={p.pending_cull}
                        serverOffsetMs={props.serverOffsetMs}
                        trans={trans}
                      />
                    ) : null}
                    {idle ? (
                      <span className="jp-GpuMem-idle">
                        <IdleFor since={p.last_activity} trans={trans} />
                      </span>
                    ) : null}
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
                </td>
                <td>{formatBytes(p.used, props.units)}</td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </div>
  );
}
