/** This notebook's JAX allocator as its kernel's snapshot reports it. */

import * as React from 'react';
import { TranslationBundle } from '@jupyterlab/translation';

import { formatBytes, formatPercent } from '../format';
import {
  AllocatorSetting,
  JaxDeviceSnapshot,
  KernelSnapshot,
  LateSettingChange,
  Units
} from '../types';
import { KeyValueRows } from './KeyValueRows';
import { StateNotice } from './StateNotice';

function DeviceStats(props: {
  device: JaxDeviceSnapshot;
  units: Units;
  trans: TranslationBundle;
}): JSX.Element {
  const { device: d, units: u, trans } = props;
  if (d.stats_reason) {
    return (
      <div className="jp-GpuMem-kv jp-GpuMem-noStats">
        <StateNotice
          title={trans.__('JAX device %1: no allocator statistics', d.jax_id)}
          detail={d.stats_reason}
        />
      </div>
    );
  }
  const rows: Array<[string, string]> = [
    [trans.__('in use'), formatBytes(d.bytes_in_use, u)],
    [trans.__('pool'), formatBytes(d.pool_bytes, u)],
    [trans.__('limit'), formatBytes(d.bytes_limit, u)],
    [trans.__('peak'), formatBytes(d.peak_bytes_in_use, u)],
    [trans.__('fragmentation'), formatPercent(d.fragmentation)]
  ];
  return (
    <table className="jp-GpuMem-table jp-GpuMem-kv">
      <caption>
        {d.allocator
          ? trans.__('JAX device %1 · %2', d.jax_id, d.allocator)
          : trans.__('JAX device %1', d.jax_id)}
      </caption>
      <KeyValueRows rows={rows} />
    </table>
  );
}

/** A setting's value as `%gpumem status` prints it; older kernels send only the raw value. */
function settingText(s: AllocatorSetting, trans: TranslationBundle): string {
  if (typeof s.shown === 'string') {
    return s.shown;
  }
  if (s.value === null || s.value === undefined) {
    return trans.__('not set');
  }
  if (typeof s.value === 'boolean') {
    return s.value ? trans.__('on') : trans.__('off');
  }
  return String(s.value);
}

/** A variable changed after JAX started, as a short line under its setting (the variable in its hover). */
function lateChangeText(late: LateSettingChange, trans: TranslationBundle): string {
  const now = late.now === null ? trans.__('unset') : `'${late.now}'`;
  return late.cell === null
    ? trans.__('%1 later: not in effect until a restart', now)
    : trans.__('%1 in cell [%2]: not in effect until a restart', now, late.cell);
}

export function AllocatorView(props: {
  snapshot: KernelSnapshot;
  units: Units;
  trans: TranslationBundle;
}): JSX.Element {
  const { snapshot: s, trans } = props;
  return (
    <div className="jp-GpuMem-allocator">
      <div className="jp-GpuMem-muted jp-GpuMem-backend">
        {s.backend_started
          ? trans.__('JAX started on %1', s.platform ?? trans.__('an unknown platform'))
          : (s.reason ?? trans.__('JAX has not started yet'))}
      </div>
      {s.devices.map(d => (
        <DeviceStats key={d.jax_id} device={d} units={props.units} trans={trans} />
      ))}
      {s.settings.length ? (
        <table className="jp-GpuMem-table jp-GpuMem-kv jp-GpuMem-settingsInEffect">
          <caption>{trans.__('Settings in effect')}</caption>
          <tbody>
            {s.settings.map(x => (
              <tr key={x.name}>
                {/* Named as %gpumem status and the magic name it: async-prealloc. */}
                <th>{x.name.replace(/_/g, '-')}</th>
                <td>
                  {settingText(x, trans)} <span className="jp-GpuMem-muted">({x.source})</span>
                  {x.changed_after_start ? (
                    <div
                      className="jp-GpuMem-warning jp-GpuMem-lateSetting"
                      title={trans.__(
                        '%1 was changed after JAX started; JAX read it when its backend started, and only a kernel restart applies the new value',
                        x.changed_after_start.variable
                      )}
                    >
                      ⚠ {lateChangeText(x.changed_after_start, trans)}
                    </div>
                  ) : null}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : null}
      {/* The kernel words its warnings. */}
      {s.warnings.map((w, i) => (
        <div key={i} className="jp-GpuMem-warning">
          ⚠ {w}
        </div>
      ))}
    </div>
  );
}
