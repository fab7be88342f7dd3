/** One GPU: name, total, utilisation and who holds its memory; or why it cannot be read. */

import * as React from 'react';
import { TranslationBundle } from '@jupyterlab/translation';

import { listsHostPids, memoryShares, processesByMemory } from '../deviceInfo';
import { formatBytes } from '../format';
import { DeviceInfo, ProcessInfo, ReadableDevice, Units, UnreadableDevice } from '../types';
import { MemoryBar } from './MemoryBar';

export function DeviceCard(props: {
  device: DeviceInfo;
  units: Units;
  trans: TranslationBundle;
  /** Whether a notebook is open: only then is there a "this notebook" share. */
  notebookOpen: boolean;
  /** Whether it was last picked in the compact list (DeviceOverview): then it is outlined. */
  picked?: boolean;
}): JSX.Element {
  const d = props.device;
  return (
    <div className="jp-GpuMem-cardSlot" data-picked={props.picked ? 'true' : undefined}>
      {d.readable ? (
        <ReadableCard
          device={d}
          units={props.units}
          trans={props.trans}
          notebookOpen={props.notebookOpen}
        />
      ) : (
        <UnreadableCard device={d} trans={props.trans} />
      )}
    </div>
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
  notebookOpen: boolean;
}): JSX.Element {
  const { device: d, units, trans } = props;
  const shares = memoryShares(d, props.notebookOpen);
  return (
    <div className="jp-GpuMem-card" data-device={d.index}>
      <div className="jp-GpuMem-cardHead">
        <span>
          {trans.__('GPU %1 · %2', d.index, d.name)}
          {d.display_active ? (
            <span
              className="jp-GpuMem-tag jp-GpuMem-displayTag"
              title={trans.__('This GPU drives a display: the screen shares its memory and time')}
            >
              {trans.__('display')}
            </span>
          ) : null}
        </span>
      </div>
      <div className="jp-GpuMem-cardFacts">
        <span className="jp-GpuMem-memUsed">
          {trans.__('%1 / %2 used', formatBytes(d.used, units), formatBytes(d.total, units))}
        </span>
        {d.utilization !== null ? (
          <span
            className="jp-GpuMem-util"
            title={trans.__(
              'Share of the last sample period in which a kernel ran on the GPU (NVML)'
            )}
          >
            {trans.__('GPU busy %1%', d.utilization)}
          </span>
        ) : null}
      </div>
      <MemoryBar
        total={d.total}
        units={units}
        ariaLabel={trans.__('memory use')}
        segments={[
          ...(shares.thisNotebook !== null
            ? [{ key: 'mine', label: trans.__('this notebook'), bytes: shares.thisNotebook }]
            : []),
          { key: 'kernels', label: trans.__('other kernels'), bytes: shares.otherKernels },
          // Only in a container, where NVML's host pids cannot be told apart from the kernels.
          ...(shares.hostPids > 0
            ? [
                {
                  key: 'hostpids',
                  label: trans.__('host pids'),
                  bytes: shares.hostPids
                }
              ]
            : []),
          { key: 'other', label: trans.__('other processes'), bytes: shares.otherProcesses },
          ...(shares.reserved > 0
            ? [
                {
                  key: 'reserved',
                  label: trans.__('reserved by the driver'),
                  bytes: shares.reserved
                }
              ]
            : []),
          { key: 'free', label: trans.__('free'), bytes: shares.free }
        ]}
      />
      {/* Host pids are said once, above the cards (HostPidsNote). */}
      {!d.pids_visible && !listsHostPids(d) ? (
        <div className="jp-GpuMem-muted">
          {trans.__('Processes are not visible: %1', d.pids_reason ?? trans.__('no reason given'))}
        </div>
      ) : null}
      <ProcessList device={d} units={units} trans={trans} />
    </div>
  );
}

/** What to show as a process's command: its command line, or why there is none. */
function commandText(p: ProcessInfo, trans: TranslationBundle): string {
  if (p.kind === 'kernel' && p.notebook_path) {
    return trans.__('kernel of %1', p.notebook_path.split('/').pop() as string);
  }
  if (p.name) {
    return p.name;
  }
  if (p.name_hidden) {
    return trans.__("another user's: hidden");
  }
  if (p.kind === 'host_pid') {
    return trans.__('not a process here (host pid)');
  }
  return p.user === null ? trans.__('not a process here') : trans.__('unknown');
}

/** Every process NVML lists on the GPU, as nvidia-smi lists them: pid, user, command, memory. */
function ProcessList(props: {
  device: ReadableDevice;
  units: Units;
  trans: TranslationBundle;
}): JSX.Element | null {
  const { device: d, units, trans } = props;
  const procs = processesByMemory(d);
  if (procs.length === 0) {
    return null;
  }
  return (
    <details className="jp-GpuMem-procs">
      <summary>{trans._n('%1 process', '%1 processes', procs.length)}</summary>
      <table className="jp-GpuMem-table jp-GpuMem-procTable">
        <thead>
          <tr>
            <th>{trans.__('pid · user · command')}</th>
            <th>{trans.__('memory')}</th>
          </tr>
        </thead>
        <tbody>
          {procs.map(p => {
            const command = commandText(p, trans);
            return (
              <tr key={p.pid} data-pid={p.pid} data-kind={p.kind}>
                <td>
                  <span className="jp-GpuMem-procWho">
                    <span className="jp-GpuMem-pid">{p.pid}</span>
                    {' · '}
                    <span className="jp-GpuMem-user">{p.user ?? '–'}</span>
                  </span>
                  <span className="jp-GpuMem-command" title={command}>
                    {command}
                  </span>
                </td>
                <td>{formatBytes(p.used, units)}</td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </details>
  );
}
