import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import {
  canShutDown,
  hostPidsNotes,
  kernelRows,
  memoryShares,
  processesByMemory
} from '../src/deviceInfo';
import { ProcessInfo, ReadableDevice, UnreadableDevice } from '../src/types';

const GiB = 1024 ** 3;

function kernelProcess(pid: number, used: number, path: string): ProcessInfo {
  return {
    pid,
    used,
    kind: 'kernel',
    kernel_id: `k${pid}`,
    kernel_name: 'python3',
    notebook_path: path,
    execution_state: 'idle',
    preallocated: null,
    name: null,
    user: null
  };
}

function otherProcess(pid: number, used: number): ProcessInfo {
  return {
    ...kernelProcess(pid, used, ''),
    kind: 'other',
    kernel_id: null,
    kernel_name: null,
    notebook_path: null
  };
}

/** A 40 GiB A100 as the server reports it. */
function a100(index: number, counts: Partial<ReadableDevice>): ReadableDevice {
  return {
    index,
    name: 'NVIDIA A100-SXM4-40GB',
    uuid: `GPU-${index}`,
    total: 40 * GiB,
    used: 0,
    free: 40 * GiB,
    utilization: 0,
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
    processes: [],
    ...counts
  };
}

const lost: UnreadableDevice = {
  index: 2,
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

describe('memoryShares', () => {
  test('what the driver reserves is a share of its own, so the legend adds up to the card', () => {
    // The fake world's GPU 0: 32 GiB used, 7.5 GiB free of 40 GiB; the driver keeps 0.5 GiB.
    const d = a100(0, { used: 32 * GiB, free: 7.5 * GiB, reserved: 0.5 * GiB });
    const shares = memoryShares(d);
    assert.equal(shares.reserved, 0.5 * GiB);
    const parts = [
      shares.thisNotebook ?? 0,
      shares.otherKernels,
      shares.hostPids,
      shares.otherProcesses,
      shares.free,
      shares.reserved
    ];
    assert.equal(
      parts.reduce((a, b) => a + b, 0),
      40 * GiB
    );
  });

  test('with no notebook open there is no "this notebook" share', () => {
    const d = a100(0, { used: 1 * GiB, free: 39 * GiB });
    assert.equal(memoryShares(d, false).thisNotebook, null);
  });

  test('this notebook, other kernels, other processes and free add up to the card', () => {
    // 30 GiB used: this notebook 20, another kernel 8, the rest (2) is other processes.
    const d = a100(0, {
      used: 30 * GiB,
      free: 10 * GiB,
      this_kernel_bytes: 20 * GiB,
      kernels_bytes: 28 * GiB
    });
    assert.deepEqual(memoryShares(d), {
      thisNotebook: 20 * GiB,
      otherKernels: 8 * GiB,
      hostPids: 0,
      otherProcesses: 2 * GiB,
      free: 10 * GiB,
      reserved: 0
    });
  });

  test('with no kernel on the card all used memory is other processes', () => {
    const d = a100(0, { used: 1 * GiB, free: 39 * GiB });
    assert.deepEqual(memoryShares(d), {
      thisNotebook: 0,
      otherKernels: 0,
      hostPids: 0,
      otherProcesses: 1 * GiB,
      free: 39 * GiB,
      reserved: 0
    });
  });

  test('when kernels are counted above what NVML calls used, no share goes negative', () => {
    const d = a100(0, { used: 10 * GiB, free: 30 * GiB, kernels_bytes: 12 * GiB });
    assert.deepEqual(memoryShares(d), {
      thisNotebook: 0,
      otherKernels: 12 * GiB,
      hostPids: 0,
      otherProcesses: 0,
      free: 30 * GiB,
      reserved: 0
    });
  });

  test('in a container, host pids that may be kernels are not other processes', () => {
    // NVML lists the host's pids (nvidia-docker#1483): 18 GiB under two, 0.5 GiB the driver's.
    const d = a100(1, {
      used: 18.5 * GiB,
      free: 21.5 * GiB,
      host_pid_bytes: 18 * GiB,
      pids_visible: false
    });
    assert.deepEqual(memoryShares(d), {
      thisNotebook: 0,
      otherKernels: 0,
      hostPids: 18 * GiB,
      otherProcesses: 0.5 * GiB,
      free: 21.5 * GiB,
      reserved: 0
    });
  });
});

describe('kernelRows', () => {
  test('kernels of every GPU in device order; other processes and unreadable GPUs give none', () => {
    const a = kernelProcess(11, 30 * GiB, 'a.ipynb');
    const b = kernelProcess(12, 8 * GiB, 'nb/b.ipynb');
    const c = kernelProcess(13, 1 * GiB, 'c.ipynb');
    const devices = [
      a100(0, { processes: [a, otherProcess(99, GiB), b] }),
      a100(1, { processes: [c] }),
      lost
    ];
    assert.deepEqual(kernelRows(devices), [
      { device: 0, process: a },
      { device: 0, process: b },
      { device: 1, process: c }
    ]);
  });

  test('no kernel anywhere gives no rows', () => {
    assert.deepEqual(kernelRows([a100(0, { processes: [otherProcess(5, GiB)] }), lost]), []);
  });
});

describe('canShutDown', () => {
  test('an idle kernel of this server that holds GPU memory', () => {
    assert.equal(canShutDown(kernelProcess(1, GiB, 'a.ipynb')), true);
  });

  test('not a busy kernel, one holding nothing, or a process that is no kernel of this server', () => {
    assert.equal(
      canShutDown({ ...kernelProcess(1, GiB, 'a.ipynb'), execution_state: 'busy' }),
      false
    );
    assert.equal(canShutDown(kernelProcess(1, 0, 'a.ipynb')), false);
    assert.equal(canShutDown({ ...kernelProcess(1, null as unknown as number, 'a.ipynb') }), false);
    assert.equal(canShutDown(otherProcess(2, GiB)), false);
  });
});

describe('processesByMemory', () => {
  test("lists a GPU's processes most memory first, unknown memory last", () => {
    const d = a100(0, {
      processes: [
        otherProcess(7, 1 * GiB),
        { ...otherProcess(5, 0), used: null },
        kernelProcess(9, 30 * GiB, 'a.ipynb'),
        otherProcess(3, 1 * GiB)
      ]
    });
    assert.deepEqual(
      processesByMemory(d).map(p => p.pid),
      [9, 3, 7, 5]
    );
  });
});

describe('hostPidsNotes', () => {
  const why = "NVML lists pids that are not processes in this server's PID namespace";
  const hostPid = (pid: number, used: number): ProcessInfo => ({
    ...otherProcess(pid, used),
    kind: 'host_pid',
    user: null
  });
  const inContainer = (index: number, pids: ProcessInfo[]) =>
    a100(index, {
      used: pids.reduce((sum, p) => sum + (p.used ?? 0), 0),
      host_pid_bytes: pids.reduce((sum, p) => sum + (p.used ?? 0), 0),
      pids_visible: false,
      pids_reason: why,
      processes: pids
    });

  test('GPUs that list host pids for the same reason share one note, in device order', () => {
    const devices = [
      inContainer(0, [hostPid(4200101, 30 * GiB), hostPid(4200102, 2 * GiB)]),
      inContainer(1, [hostPid(4200201, 10 * GiB)]),
      a100(2, {})
    ];
    assert.deepEqual(hostPidsNotes(devices), [{ gpus: [0, 1], reason: why }]);
  });

  test('hidden processes for another reason, and unreadable GPUs, are not host pids', () => {
    const mig = a100(0, { pids_visible: false, pids_reason: 'MIG hides processes' });
    assert.deepEqual(hostPidsNotes([mig, lost]), []);
  });
});
