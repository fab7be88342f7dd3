/** Every GPU on one row each: used of total with a small bar, this notebook's share, busy; the fullest marked. */

import * as React from 'react';
import { TranslationBundle } from '@jupyterlab/translation';

import { OverviewRow } from '../deviceOverview';
import { formatBytesOf } from '../format';
import { Units } from '../types';

function rowTitle(r: OverviewRow, units: Units, trans: TranslationBundle): string {
  const name = r.name ? trans.__('GPU %1 · %2', r.index, r.name) : trans.__('GPU %1', r.index);
  if (!r.readable || r.used === null || r.total === null) {
    return trans.__('%1: cannot be read. Click for its card.', name);
  }
  const mine =
    r.mine !== null && r.mine > 0
      ? ' ' + trans.__('This notebook holds %1.', formatBytesOf(r.mine, r.total, units))
      : '';
  return (
    trans.__('%1: %2 used.', name, formatBytesOf(r.used, r.total, units)) +
    mine +
    ' ' +
    trans.__('Click for its card.')
  );
}

function OverviewLine(props: {
  row: OverviewRow;
  units: Units;
  trans: TranslationBundle;
  onSelect: (index: number) => void;
}): JSX.Element {
  const { row: r, units, trans } = props;
  const pct = r.fraction === null ? null : Math.round(100 * r.fraction);
  const minePct = r.mine !== null && r.total ? (100 * r.mine) / r.total : 0;
  return (
    <li>
      <button
        type="button"
        className="jp-GpuMem-overviewRow"
        data-device={r.index}
        data-fullest={r.fullest ? 'true' : undefined}
        data-nearly-full={r.nearlyFull ? 'true' : undefined}
        title={rowTitle(r, units, trans)}
        onClick={() => props.onSelect(r.index)}
      >
        <span className="jp-GpuMem-overviewGpu">{trans.__('GPU %1', r.index)}</span>
        {r.readable && r.used !== null && r.total !== null ? (
          <>
            <span className="jp-GpuMem-miniBar" aria-hidden="true">
              <span className="jp-GpuMem-miniUsed" style={{ width: `${pct}%` }} />
              {minePct > 0 ? (
                <span className="jp-GpuMem-miniMine" style={{ width: `${minePct}%` }} />
              ) : null}
            </span>
            <span className="jp-GpuMem-overviewUsed">{formatBytesOf(r.used, r.total, units)}</span>
            <span className="jp-GpuMem-overviewPct">{`${pct}%`}</span>
            <span className="jp-GpuMem-overviewBusy">
              {r.utilization !== null ? `${r.utilization}%` : ''}
            </span>
          </>
        ) : (
          <span className="jp-GpuMem-muted jp-GpuMem-overviewUnread">
            {trans.__('cannot be read')}
          </span>
        )}
      </button>
    </li>
  );
}

export function DeviceOverview(props: {
  rows: OverviewRow[];
  units: Units;
  trans: TranslationBundle;
  /** Shows GPU `index`'s card. */
  onSelect: (index: number) => void;
}): JSX.Element {
  const { trans } = props;
  const anyMine = props.rows.some(r => r.mine !== null && r.mine > 0);
  const fullest = props.rows.find(r => r.fullest);
  return (
    <div className="jp-GpuMem-overview">
      <div className="jp-GpuMem-overviewHead">
        {trans._n('%1 GPU', '%1 GPUs', props.rows.length)}
        <span className="jp-GpuMem-muted">
          {' · '}
          {trans.__('used of total, busy')}
          {anyMine ? (
            <>
              {' · '}
              <span className="jp-GpuMem-swatch jp-GpuMem-seg-mine" />
              {trans.__('this notebook')}
            </>
          ) : null}
        </span>
      </div>
      {fullest && fullest.fraction !== null ? (
        <div className="jp-GpuMem-overviewFullest">
          {trans.__('Fullest: GPU %1 (%2%)', fullest.index, Math.round(100 * fullest.fraction))}
        </div>
      ) : null}
      <ul className="jp-GpuMem-overviewList">
        {props.rows.map(r => (
          <OverviewLine
            key={r.index}
            row={r}
            units={props.units}
            trans={trans}
            onSelect={props.onSelect}
          />
        ))}
      </ul>
    </div>
  );
}
