import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import {
  afterPending,
  badgeText,
  countdownText,
  durationText,
  kernelName,
  opensAgain,
  pendingKernels,
  serverOffsetMs,
  shutdownText
} from '../src/cullNotices';
import { CullRecord, DevicesReply, ProcessInfo, ReadableDevice } from '../src/types';
import { english } from './english';

const GiB = 1024 ** 3;
const T = 1_800_000_000; // the reading's time, POSIX seconds
const MESSAGE =
  'this kernel holds 20.00 GiB of GPU 2 and has been idle 14 s; it will be shut down in 46 s';

/** A kernel idle 14 s at T, holding 20 GiB of GPU 2, due at T + 46 (cull_idle_after = 60). */
function kernelRow(
  kernelId: string,
  cullAt: number | null,
  notebook: string | null = 'nb/world_cull.ipynb'
): ProcessInfo {
  return {
    pid: 100,
    used: 20 * GiB,
    kind: 'kernel',
    kernel_id: kernelId,
    kernel_name: 'python3',
    notebook_path: notebook,
    execution_state: 'idle',
    preallocated: null,
    name: null,
    user: null,
    pending_cull:
      cullAt === null
        ? null
        : {
            cull_at: cullAt,
            idle_seconds: 14,
            held_bytes: 20 * GiB,
            per_device: [[2, 20 * GiB]],
            message: MESSAGE
          }
  };
}

/** A 40 GiB GPU as the server reports it (synthetic numbers). */
function gpu(index: number, processes: ProcessInfo[]): ReadableDevice {
  return {
    index,
    name: 'NVIDIA A100-SXM4-40GB',
    uuid: `GPU-${index}`,
    total: 40 * GiB,
    used: 20 * GiB,
    free: 20 * GiB,
    utilization: 0,
    display_active: false,
    mig: false,
    readable: true,
    reason: null,
    pids_visible: true,
    pids_reason: null,
    this_kernel_bytes: 0,
    kernels_bytes: 20 * GiB,
    other_bytes: 0,
    host_pid_bytes: 0,
    processes
  };
}

function reply(devices: ReadableDevice[], recent: CullRecord[] = []): DevicesReply {
  return {
    t: T,
    source: 'nvml',
    synthetic: true,
    state: 'ok',
    reason: null,
    poll_interval: 2,
    devices,
    warnings: [],
    recent_culls: recent
  };
}

const RECORD: CullRecord = {
  kernel_id: 'k1',
  notebook_path: 'nb/world_cull.ipynb',
  freed_bytes: 20 * GiB,
  per_device: [[2, 20 * GiB]],
  culled_at: T + 47,
  idle_seconds: 61,
  idle_after: 60,
  reason: 'it had been idle 61 s while holding 20.00 GiB of GPU 2; …'
};

describe('pendingKernels', () => {
  test('a kernel on two GPUs is one pending cull, its idle time dated from the reading', () => {
    const both = reply([gpu(0, [kernelRow('k1', T + 46)]), gpu(2, [kernelRow('k1', T + 46)])]);
    const found = pendingKernels(both);
    assert.deepEqual(
      found.map(p => [p.kernelId, p.notebookPath, p.pending.cull_at, p.idleSince]),
      [['k1', 'nb/world_cull.ipynb', T + 46, T - 14]]
    );
  });

  test('rows with no pending cull, and unreadable replies, give nothing', () => {
    assert.deepEqual(pendingKernels(reply([gpu(0, [kernelRow('k1', null)])])), []);
    assert.deepEqual(pendingKernels({ ...reply([]), state: 'no_driver' }), []);
    assert.deepEqual(pendingKernels(null), []);
  });

  test('a kernel the reply records as culled is not pending, though a row still lists it', () => {
    // The server's kernel list can still hold a culled kernel for a reading; its countdown must
    // turn into the notice of the shutdown, not stay beside it.
    const stale = reply([gpu(2, [kernelRow('k1', T + 46), kernelRow('k2', T + 50)])], [RECORD]);
    assert.deepEqual(
      pendingKernels(stale).map(p => p.kernelId),
      ['k2']
    );
    assert.deepEqual(afterPending(stale, 'k1', T + 46, T + 47), { kind: 'culled', record: RECORD });
  });
});

describe('the words', () => {
  const [p] = pendingKernels(reply([gpu(2, [kernelRow('k1', T + 46)])]));

  test('the countdown names the notebook, what it holds, and counts down with the clock', () => {
    assert.equal(
      countdownText(p, T, 'binary', english),
      'world_cull.ipynb: idle 14 s, holding 20.0 GiB of GPU 2. Its kernel will be shut down in 46 s.'
    );
    assert.equal(
      countdownText(p, T + 30, 'binary', english),
      'world_cull.ipynb: idle 44 s, holding 20.0 GiB of GPU 2. Its kernel will be shut down in 16 s.'
    );
  });

  test('past its time the countdown says it is being shut down, never "in 0 s" or a negative', () => {
    assert.equal(
      countdownText(p, T + 70, 'binary', english),
      'world_cull.ipynb: idle 84 s, holding 20.0 GiB of GPU 2. Its kernel is being shut down now.'
    );
    assert.equal(badgeText(p.pending, T + 46, english), 'shutting down');
  });

  test('the row badge counts down as the notification does', () => {
    assert.equal(badgeText(p.pending, T + 4, english), 'shut down in 42 s');
    assert.equal(badgeText({ ...p.pending, cull_at: T + 3000 }, T, english), 'shut down in 50 min');
  });

  test('the shutdown notice says why, what it freed, and how to get the state back', () => {
    assert.equal(
      shutdownText(RECORD, 'binary', english),
      'world_cull.ipynb: kernel shut down after 61 s idle; 20.0 GiB of GPU 2 freed. ' +
        'Rerun the notebook to get its variables back.'
    );
  });

  test('every message fits a toast (140 characters) with the longest name and sizes', () => {
    const long = 'a'.repeat(200) + '.ipynb';
    const record = { ...RECORD, notebook_path: long, per_device: [] as [number, number][] };
    const texts = [
      shutdownText(
        { ...record, freed_bytes: 999 * GiB, idle_seconds: 99 * 3600 },
        'decimal',
        english
      ),
      countdownText({ ...p, notebookPath: long }, T - 99 * 3600, 'decimal', english)
    ];
    for (const text of texts) {
      assert.ok(text.length <= 140, `${text.length}: ${text}`);
    }
  });

  test('names are cut to fit, and a kernel with no notebook is named by its id', () => {
    assert.equal(kernelName('a/b/short.ipynb', 'k'), 'short.ipynb');
    assert.equal(kernelName(`${'x'.repeat(40)}.ipynb`, 'k'), `${'x'.repeat(23)}…`);
    assert.equal(kernelName(null, 'k2'), 'kernel k2');
  });

  test('durations read as the server words them', () => {
    assert.deepEqual([45, 89, 90, 3300, 3 * 3600].map(durationText), [
      '45 s',
      '89 s',
      '2 min',
      '55 min',
      '3.0 h'
    ]);
  });
});

describe('what follows a pending cull', () => {
  test('the record of its cull turns the countdown into the shutdown notice', () => {
    assert.deepEqual(afterPending(reply([gpu(2, [])], [RECORD]), 'k1', T + 46, T + 47), {
      kind: 'culled',
      record: RECORD
    });
  });

  test('gone at its time with no record yet: wait for the record', () => {
    assert.deepEqual(afterPending(reply([gpu(2, [])]), 'k1', T + 46, T + 46), { kind: 'waiting' });
  });

  test('still listed with no pending cull (active again, or kept): over', () => {
    assert.deepEqual(afterPending(reply([gpu(2, [kernelRow('k1', null)])]), 'k1', T + 46, T + 47), {
      kind: 'over'
    });
  });

  test('gone well before its time (shut down by its user): over', () => {
    assert.deepEqual(afterPending(reply([gpu(2, [])]), 'k1', T + 46, T + 10), { kind: 'over' });
  });

  test('one notification per pending cull: a moved cull time updates it, a closed one stays closed', () => {
    assert.equal(opensAgain(false, false, T + 46, T + 48), false); // open: updated in place
    assert.equal(opensAgain(true, false, T + 46, T + 48), false); // closed by the user
    assert.equal(opensAgain(true, true, T + 46, T + 46.5), false); // kept, same cull still read
    assert.equal(opensAgain(true, true, T + 46, T + 110), true); // kept, and idle again
  });

  test("the server's clock is read from the reply's time and its arrival", () => {
    assert.equal(serverOffsetMs(T, T * 1000 - 2500), 2500);
  });
});
