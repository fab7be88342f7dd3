/** A horizontal stacked bar over `total` bytes, with a legend. */

import * as React from 'react';

import { formatBytes } from '../format';
import { Units } from '../types';

export interface BarSegment {
  key: string;
  /** Already translated. */
  label: string;
  bytes: number;
}

export function MemoryBar(props: {
  total: number;
  segments: BarSegment[];
  units: Units;
  /** Already translated. */
  ariaLabel: string;
}): JSX.Element {
  const total = Math.max(props.total, 1);
  return (
    <div className="jp-GpuMem-barWrap">
      <div className="jp-GpuMem-bar" role="img" aria-label={props.ariaLabel}>
        {props.segments.map(s => (
          <div
            key={s.key}
            className={`jp-GpuMem-seg jp-GpuMem-seg-${s.key}`}
            style={{ width: `${(100 * Math.max(s.bytes, 0)) / total}%` }}
            title={`${s.label}: ${formatBytes(s.bytes, props.units)}`}
          />
        ))}
      </div>
      <ul className="jp-GpuMem-legend">
        {props.segments.map(s => (
          <li key={s.key}>
            <span className={`jp-GpuMem-swatch jp-GpuMem-seg-${s.key}`} />
            {s.label} <b>{formatBytes(s.bytes, props.units)}</b>
          </li>
        ))}
      </ul>
    </div>
  );
}
