import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { overviewRows, showsOverview } from '../src/deviceOverview';
import { ReadableDevice, UnreadableDevice } from '../src/types';

const GiB = 1024 ** 3;
const MiB = 1024 ** 2;

/** An H100 80GB as the server reports it from the dgx_h100 world: 81,559 MiB. */
function h100(index: number, usedGiB: number, utilization: number | null = 0): ReadableDevice {
  const total = 81_559 * MiB;
  return {
    index,
    name: 'NVIDIA H100 80GB HBM3',
    uuid: `GPU-${index}`,
    total,
    used: usedGiB * GiB,
    free: total - 566 * MiB - usedGiB * GiB,
    reserved: 566 * MiB,
    utilization,
    display_active: false,
    mig: false,
    readable: true,
    reason: null,
    pids_visible: true,
    pids_reason: null,
    this_kernel_bytes: 0,
    kernels_bytes: 0,
    other_bytes: 0,
    host_pid_bytes: 0,
    processes: []
  };
}

const lost: UnreadableDevice = {
  index: 3,
  name: null,
  uuid: null,
  total: null,
  used: null,
  free: null,
  utilization: null,
  display_active: null,
  mig: null,
  readable: false,
  reason: 'GPU is lost',
  pids_visible: false,
  pids_reason: 'the device cannot be read',
  this_kernel_bytes: 0,
  kernels_bytes: 0,
  other_bytes: 0,
  host_pid_bytes: 0,
  processes: []
};

// The dgx_h100 world: 60 GiB on GPUs 0-3, 20 on 4, 74 on 5, 8 on 6, 7 idle.
const dgx = [60, 60, 60, 60, 20, 74, 8, 0].map((gib, i) => h100(i, gib, 50));

describe('showsOverview', () => {
  test('one to three GPUs keep the cards alone; four and more get the compact list', () => {
    assert.deepEqual([1, 2, 3, 4, 8, 16].map(showsOverview), [
      false,
      false,
      false,
      true,
      true,
      true
    ]);
  });
});

describe('overviewRows', () => {
  test('eight H100s: rows in index order, GPU 5 (74 of 79.6 GiB) marked fullest and nearly full', () => {
    const rows = overviewRows(dgx, false);
    assert.deepEqual(
      rows.map(r => r.index),
      [0, 1, 2, 3, 4, 5, 6, 7]
    );
    assert.deepEqual(
      rows.filter(r => r.fullest).map(r => r.index),
      [5]
    );
    assert.deepEqual(
      rows.filter(r => r.nearlyFull).map(r => r.index),
      [5]
    );
    // 74 GiB of 81,559 MiB: 0.929.
    assert.equal(rows[5].fraction?.toFixed(3), '0.929');
    assert.equal(rows[7].fraction, 0);
  });

  test('sixteen V100s (the sixteen_v100 world): sixteen rows, GPU 11 (31 of 32 GiB) the one fullest', () => {
    // jupyter_gpumem/testing/scenarios.py's SIXTEEN_V100_USED_GIB, on 32,768 MiB cards.
    const used = [28, 28, 28, 28, 28, 28, 28, 28, 12, 12, 4, 31, 0, 0, 16, 2];
    const v100s = used.map((gib, i) => ({
      ...h100(i, gib, 3 * gib),
      name: 'Tesla V100-SXM3-32GB',
      total: 32_768 * MiB,
      reserved: 256 * MiB,
      free: 32_768 * MiB - 256 * MiB - gib * GiB
    }));
    const rows = overviewRows(v100s, false);
    assert.deepEqual(
      rows.map(r => r.index),
      [...Array(16).keys()]
    );
    assert.deepEqual(
      rows.filter(r => r.fullest).map(r => r.index),
      [11]
    );
    assert.deepEqual(
      rows.filter(r => r.nearlyFull).map(r => r.index),
      [11]
    );
    assert.equal(rows[11].fraction?.toFixed(3), '0.969');
    assert.deepEqual(
      rows.filter(r => r.fraction === 0).map(r => r.index),
      [12, 13]
    );
  });

  test("this notebook's share is its kernel's bytes, and null with no notebook open", () => {
    const withMine = dgx.map(d =>
      d.index === 6 ? { ...d, this_kernel_bytes: 6 * GiB, kernels_bytes: 6 * GiB } : d
    );
    assert.equal(overviewRows(withMine, true)[6].mine, 6 * GiB);
    assert.equal(overviewRows(withMine, true)[0].mine, 0);
    assert.equal(overviewRows(withMine, false)[6].mine, null);
  });

  test('equally full GPUs: the lowest index is the fullest', () => {
    const rows = overviewRows([h100(0, 10), h100(1, 40), h100(2, 40), h100(3, 5)], false);
    assert.deepEqual(
      rows.filter(r => r.fullest).map(r => r.index),
      [1]
    );
  });

  test('no GPU in use: none is called fullest', () => {
    const rows = overviewRows([h100(0, 0), h100(1, 0), h100(2, 0), h100(3, 0)], false);
    assert.equal(
      rows.some(r => r.fullest),
      false
    );
  });

  test('a GPU that cannot be read has no numbers and is never the fullest', () => {
    const rows = overviewRows([h100(0, 1), h100(1, 2), h100(2, 3), lost], true);
    assert.deepEqual(rows[3], {
      index: 3,
      name: null,
      readable: false,
      used: null,
      total: null,
      fraction: null,
      mine: null,
      utilization: null,
      fullest: false,
      nearlyFull: false
    });
    assert.equal(rows[2].fullest, true);
  });

  test('busy is passed on as NVML gave it, null where not supported (MIG)', () => {
    const rows = overviewRows([h100(0, 1, null), h100(1, 1, 97)], false);
    assert.deepEqual(
      rows.map(r => r.utilization),
      [null, 97]
    );
  });
});
