import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { newCullNotices } from '../src/cullNotices';
import { DevicesReply, ProcessInfo, ReadableDevice } from '../src/types';

const GiB = 1024 ** 3;
const MESSAGE =
  'this kernel holds 30.00 GiB of GPU 2 and has been idle 55 min; it will be shut down in 5 min';

function kernelRow(
  kernelId: string,
  cullAt: number | null,
  notebook: string | null = 'nb/a.ipynb'
): ProcessInfo {
  return {
    pid: 100,
    used: 30 * GiB,
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
        : { cull_at: cullAt, idle_seconds: 3300, held_bytes: 30 * GiB, message: MESSAGE }
  };
}

/** A 40 GiB GPU as the server reports it (synthetic numbers). */
function gpu(index: number, processes: ProcessInfo[]): ReadableDevice {
  return {
    index,
    name: 'NVIDIA A100-SXM4-40GB',
    uuid: `GPU-${index}`,
    total: 40 * GiB,
    used: 30 * GiB,
    free: 10 * GiB,
    utilization: 0,
    display_active: false,
    mig: false,
    readable: true,
    reason: null,
    pids_visible: true,
    pids_reason: null,
    this_kernel_bytes: 0,
    kernels_bytes: 30 * GiB,
    other_bytes: 0,
    host_pid_bytes: 0,
    processes
  };
}

function reply(devices: ReadableDevice[]): DevicesReply {
  return {
    t: 0,
    source: 'nvml',
    synthetic: true,
    state: 'ok',
    reason: null,
    poll_interval: 2,
    devices,
    warnings: []
  };
}

describe('newCullNotices', () => {
  test("a pending cull is one notice naming the notebook, with the server's words", () => {
    const notices = newCullNotices(reply([gpu(2, [kernelRow('k1', 1000)])]), new Set());
    assert.deepEqual(notices, [{ key: 'k1@1000', message: `nb/a.ipynb: ${MESSAGE}` }]);
  });

  test('a notice already shown is not shown again', () => {
    assert.deepEqual(
      newCullNotices(reply([gpu(2, [kernelRow('k1', 1000)])]), new Set(['k1@1000'])),
      []
    );
  });

  test('a kernel on two GPUs is one notice, and one with a later cull time is new', () => {
    const both = reply([gpu(0, [kernelRow('k1', 2000)]), gpu(2, [kernelRow('k1', 2000)])]);
    assert.deepEqual(
      newCullNotices(both, new Set(['k1@1000'])).map(n => n.key),
      ['k1@2000']
    );
  });

  test('rows with no pending cull give nothing, a kernel with no notebook is named by its id', () => {
    const notices = newCullNotices(
      reply([gpu(0, [kernelRow('k1', null), kernelRow('k2', 5, null)])]),
      new Set()
    );
    assert.deepEqual(
      notices.map(n => n.message),
      [`kernel k2: ${MESSAGE}`]
    );
  });
});
