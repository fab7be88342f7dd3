import * as React from 'react';

import { formatBytes, formatPercent } from '../format';
import { KernelSnapshot, Units } from '../types';
import { StateNotice } from './StateNotice';

/** This notebook's JAX allocator as its kernel reports it. */
export function AllocatorView(props: {
  snapshot: KernelSnapshot;
  units: Units;
}): JSX.Element {
  const s = props.snapshot;
  const u = props.units;
  return (
    <div className="jp-GpuMem-allocator">
      <div className="jp-GpuMem-muted jp-GpuMem-backend">
        {s.backend_started
          ? `JAX started on ${s.platform ?? 'an unknown platform'}`
          : s.reason ?? 'JAX has not started yet'}
      </div>
      {s.devices.map(d =>
        d.stats_reason ? (
          <div className="jp-GpuMem-kv jp-GpuMem-noStats" key={d.jax_id}>
            <StateNotice
              title={`JAX device ${d.jax_id}: no allocator statistics`}
              detail={d.stats_reason}
            />
          </div>
        ) : (
          <table className="jp-GpuMem-table jp-GpuMem-kv" key={d.jax_id}>
            <caption>
              JAX device {d.jax_id}
              {d.allocator ? ` · ${d.allocator}` : ''}
            </caption>
            <tbody>
              <tr><th>in use</th><td>{formatBytes(d.bytes_in_use, u)}</td></tr>
              <tr><th>pool</th><td>{formatBytes(d.pool_bytes, u)}</td></tr>
              <tr><th>limit</th><td>{formatBytes(d.bytes_limit, u)}</td></tr>
              <tr><th>peak</th><td>{formatBytes(d.peak_bytes_in_use, u)}</td></tr>
              <tr><th>fragmentation</th><td>{formatPercent(d.fragmentation)}</td></tr>
            </tbody>
          </table>
        )
      )}
      {s.settings.length ? (
        <table className="jp-GpuMem-table jp-GpuMem-kv jp-GpuMem-settingsInEffect">
          <caption>Settings in effect</caption>
          <tbody>
            {s.settings.map(x => (
              <tr key={x.name}>
                <th>{x.name}</th>
                <td>
                  {String(x.value)} <span className="jp-GpuMem-muted">({x.source})</span>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : null}
      {s.warnings.map((w, i) => (
        <div key={i} className="jp-GpuMem-warning">
          ⚠ {w}
        </div>
      ))}
    </div>
  );
}
