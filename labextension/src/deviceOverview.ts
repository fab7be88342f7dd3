/** Many GPUs at a glance: one compact row per GPU, and which is fullest. Pure arithmetic over the reply. */

import { NEARLY_FULL_FRACTION, OVERVIEW_FROM_GPUS } from './constants';
import { memoryShares } from './deviceInfo';
import { DeviceInfo } from './types';

/** One GPU in the compact list; byte counts are null for a GPU that cannot be read. */
export interface OverviewRow {
  index: number;
  name: string | null;
  readable: boolean;
  used: number | null;
  total: number | null;
  /** used / total, 0..1; null when unknown. */
  fraction: number | null;
  /** This notebook's bytes on the GPU; null when no notebook is open or the GPU cannot be read. */
  mine: number | null;
  utilization: number | null;
  /** The fullest readable GPU (the lowest index among equals); none when nothing is used. */
  fullest: boolean;
  nearlyFull: boolean;
}

/** Whether the panel shows the compact list for `count` GPUs. */
export function showsOverview(count: number): boolean {
  return count >= OVERVIEW_FROM_GPUS;
}

/** A row per GPU, in index order, the fullest marked. */
export function overviewRows(devices: DeviceInfo[], notebookOpen: boolean): OverviewRow[] {
  const rows: OverviewRow[] = devices.map(d => {
    if (!d.readable) {
      return {
        index: d.index,
        name: d.name,
        readable: false,
        used: null,
        total: null,
        fraction: null,
        mine: null,
        utilization: null,
        fullest: false,
        nearlyFull: false
      };
    }
    const fraction = d.total > 0 ? Math.min(Math.max(d.used, 0) / d.total, 1) : null;
    return {
      index: d.index,
      name: d.name,
      readable: true,
      used: d.used,
      total: d.total,
      fraction,
      mine: memoryShares(d, notebookOpen).thisNotebook,
      utilization: d.utilization,
      fullest: false,
      nearlyFull: fraction !== null && fraction >= NEARLY_FULL_FRACTION
    };
  });
  let top: OverviewRow | null = null;
  for (const r of rows) {
    if (
      r.fraction !== null &&
      r.fraction > 0 &&
      (top === null || r.fraction > (top.fraction ?? 0))
    ) {
      top = r;
    }
  }
  if (top) {
    top.fullest = true;
  }
  return rows;
}
