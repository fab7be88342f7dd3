/** Over-commit warnings, each with the one-click fix when there is a notebook to fix. */

import * as React from 'react';
import { TranslationBundle } from '@jupyterlab/translation';

import { OvercommitWarning } from '../types';

export function WarningList(props: {
  warnings: OvercommitWarning[];
  canFix: boolean;
  onFix: (fraction: number) => void;
  trans: TranslationBundle;
}): JSX.Element | null {
  if (props.warnings.length === 0) {
    return null;
  }
  return (
    <div className="jp-GpuMem-warnings">
      {props.warnings.map((w, i) => (
        <div key={i} className="jp-GpuMem-warning" role="alert">
          {/* The server words the warning. */}
          <span>⚠ {w.message}</span>
          {props.canFix && w.suggested_fraction ? (
            <button
              className="jp-mod-styled jp-mod-warn jp-GpuMem-fix"
              onClick={() => props.onFix(w.suggested_fraction as number)}
            >
              {props.trans.__('Give this notebook fraction %1 and restart', w.suggested_fraction)}
            </button>
          ) : null}
        </div>
      ))}
    </div>
  );
}
