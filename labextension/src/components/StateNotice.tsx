/** A calm, explained state: no GPU, no NVML, server unreachable, kernel dead... */

import * as React from 'react';

export function StateNotice(props: {
  /** Already translated, as is `detail`. */
  title: string;
  detail?: string | null;
  kind?: 'info' | 'warn';
  children?: React.ReactNode;
}): JSX.Element {
  return (
    <div className={`jp-GpuMem-notice jp-GpuMem-notice-${props.kind ?? 'info'}`} role="status">
      <div className="jp-GpuMem-notice-title">{props.title}</div>
      {props.detail ? <div className="jp-GpuMem-notice-detail">{props.detail}</div> : null}
      {props.children}
    </div>
  );
}
