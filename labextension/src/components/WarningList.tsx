import * as React from 'react';

import { OvercommitWarning } from '../types';

/** Over-commit warnings, each with the one-click fix when there is a notebook to fix. */
export function WarningList(props: {
  warnings: OvercommitWarning[];
  canFix: boolean;
  onFix: (fraction: number) => void;
}): JSX.Element | null {
  if (props.warnings.length === 0) {
    return null;
  }
  return (
    <div className="jp-GpuMem-warnings">
      {props.warnings.map((w, i) => (
        <div key={i} className="jp-GpuMem-warning" role="alert">
          <span>⚠ {w.message}</span>
          {props.canFix && w.suggested_fraction ? (
            <button
              className="jp-mod-styled jp-mod-warn jp-GpuMem-fix"
              onClick={() => props.onFix(w.suggested_fraction as number)}
            >
              Give this notebook fraction {w.suggested_fraction} and restart
            </button>
          ) : null}
        </div>
      ))}
    </div>
  );
}
