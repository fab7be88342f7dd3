import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { statusSummary } from '../src/statusSummary';
import { DevicesReply, KernelSnapshot, ReadableDevice } from '../src/types';
import { english } from './english';

const GiB = 1024 ** 3;

/** A 40 GiB A100 as the server reports it (synthetic numbers). */
function a100(index: number, thisKernel = 0, others = 0): ReadableDevice {
  return {
    index,
    name: 'NVIDIA A100-SXM4-40GB',
    uuid: `GPU-${index}`,
    total: 40 * GiB,
    used: thisKernel + others,
    free: 40 * GiB - thisKernel - others,
    utilization: 0,
    display_active: false,
    mig: false,
    readable: true,
    reason: null,
    pids_visible: true,
    pids_reason: null,
    this_kernel_bytes: thisKernel,
    kernels_bytes: thisKernel,
    other_bytes: others,
    host_pid_bytes: 0,
    processes: []
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

function snapshot(change: Partial<KernelSnapshot>): KernelSnapshot {
  return {
    type: 'snapshot',
    backend_started: false,
    platform: null,
    settings: [],
    warnings: [],
    devices: [],
    reason: null,
    ...change
  };
}

const onGpu1 = snapshot({
  backend_started: true,
  platform: 'gpu',
  // The pool has grown to 30 GiB of a 38 GiB limit: the status bar shows the pool, not the limit.
  devices: [
    {
      jax_id: 0,
      nvml_index: 1,
      allocator: 'bfc',
      bytes_in_use: 2 * GiB,
      pool_bytes: 30 * GiB,
      bytes_limit: 38 * GiB,
      peak_bytes_in_use: 2 * GiB,
      largest_free_block_bytes: 28 * GiB,
      fragmentation: 0
    }
  ]
});

describe('statusSummary', () => {
  test("JAX on a GPU: that GPU's use by every process, this notebook's share, and JAX's pool", () => {
    const s = statusSummary(
      reply([a100(0), a100(1, 30.5 * GiB, 6 * GiB), a100(2)]),
      onGpu1,
      'binary',
      english
    );
    assert.deepEqual(
      [s.text, s.warn],
      ['GPU 1 · 36.5/40.0 GiB · this notebook 30.5 GiB · JAX pool 30.0 GiB', false]
    );
    assert.equal(
      s.title,
      'GPU 1 (NVIDIA A100-SXM4-40GB): 36.5 GiB of 40.0 GiB in use by every process; this ' +
        "notebook's kernel holds 30.5 GiB of it."
    );
  });

  test('JAX on the CPU while GPUs are here is a warning, worded by the kernel in the tooltip', () => {
    const sentence =
      "NVML sees 3 GPUs, but JAX runs on the CPU: JAX's CUDA plugin is not installed. Fix: ...";
    const cpu = snapshot({
      backend_started: true,
      platform: 'cpu',
      cpu_fallback: { gpus: 3, headline: 'NVML sees 3 GPUs, but JAX runs on the CPU', sentence }
    });
    const s = statusSummary(reply([a100(0), a100(1), a100(2)]), cpu, 'binary', english);
    assert.deepEqual(s, { text: 'JAX on CPU · 3 GPUs here', title: sentence, warn: true });
  });

  test('before JAX starts, the GPU count and that JAX has not started', () => {
    const s = statusSummary(reply([a100(0), a100(1)]), snapshot({}), 'binary', english);
    assert.equal(s.text, '2 GPUs · JAX not started');
  });

  test('without a snapshot (extension not loaded) the GPU the server sees the kernel on', () => {
    const s = statusSummary(reply([a100(0), a100(1, 4 * GiB, 10 * GiB)]), null, 'binary', english);
    assert.equal(s.text, 'GPU 1 · 14.0/40.0 GiB · this notebook 4.00 GiB');
  });

  test('no GPU, and nothing read yet, are calm', () => {
    const none = { ...reply([]), state: 'no_library' as const, reason: 'NVML is not installed' };
    assert.deepEqual(statusSummary(none, null, 'binary', english), {
      text: 'No GPU',
      title: 'NVML is not installed',
      warn: false
    });
    assert.equal(statusSummary(null, null, 'binary', english).text, 'GPU');
  });
});
