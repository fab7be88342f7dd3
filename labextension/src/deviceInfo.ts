/** Who holds a GPU's memory, and which kernels hold some: pure arithmetic over the devices reply. */

import { DeviceInfo, ProcessInfo, ReadableDevice } from './types';

/** A readable GPU's memory split six ways; the parts add up to `total`. */
export interface MemoryShares {
  /** Null when no notebook is open: there is no "this notebook" to speak of. */
  thisNotebook: number | null;
  otherKernels: number;
  /** Processes NVML lists by host pids (a container): kernels of this server or not, it cannot tell. */
  hostPids: number;
  /** Memory NVML counts as used that no kernel holds: other processes, the driver, the display. */
  otherProcesses: number;
  free: number;
  /** What the driver keeps for itself, neither used nor free (NVML's memory_v2 `reserved`). */
  reserved: number;
}

/**
 * The shares of a readable GPU; `notebookOpen` false leaves out "this notebook". None is
 * negative, even when the counts disagree. `reserved` is what is left of `total` after used and
 * free (the server's `reserved` where it adds up, else the difference), so the legend adds up.
 */
export function memoryShares(d: ReadableDevice, notebookOpen = true): MemoryShares {
  const mine = Math.max(d.this_kernel_bytes, 0);
  const otherKernels = Math.max(d.kernels_bytes - mine, 0);
  const hostPids = Math.max(d.host_pid_bytes ?? 0, 0);
  const otherProcesses = Math.max(d.used - mine - otherKernels - hostPids, 0);
  const free = Math.max(d.free, 0);
  const reserved = Math.max(d.total - Math.max(d.used, 0) - free, 0);
  return {
    thisNotebook: notebookOpen ? mine : null,
    otherKernels,
    hostPids,
    otherProcesses,
    free,
    reserved
  };
}

/** A GPU's processes, most memory first (unknown memory last), then by pid. */
export function processesByMemory(d: DeviceInfo): ProcessInfo[] {
  return [...d.processes].sort((a, b) => (b.used ?? -1) - (a.used ?? -1) || a.pid - b.pid);
}

/** One kernel on one GPU. */
export interface KernelRow {
  device: number;
  process: ProcessInfo;
}

/** Every kernel process on every GPU, in device order; unreadable GPUs list none. */
export function kernelRows(devices: DeviceInfo[]): KernelRow[] {
  const rows: KernelRow[] = [];
  for (const d of devices) {
    for (const p of d.processes) {
      if (p.kind === 'kernel') {
        rows.push({ device: d.index, process: p });
      }
    }
  }
  return rows;
}

/** An idle kernel of this server that holds GPU memory: the panel offers to shut it down. */
export function canShutDown(p: ProcessInfo): boolean {
  return p.kind === 'kernel' && !!p.kernel_id && p.execution_state === 'idle' && (p.used ?? 0) > 0;
}

/** Whether a readable GPU's processes cannot be matched because NVML lists the host's pids. */
export function listsHostPids(d: DeviceInfo): boolean {
  return (
    d.readable &&
    !d.pids_visible &&
    ((d.host_pid_bytes ?? 0) > 0 || d.processes.some(p => p.kind === 'host_pid'))
  );
}

/** GPUs whose processes are the host's pids, with the server's reason for them. */
export interface HostPidsNote {
  gpus: number[];
  reason: string | null;
}

/**
 * One note per reason for the GPUs that list host pids, in device order: the server gives every
 * such GPU the same reason, so the panel says it once instead of on each card.
 */
export function hostPidsNotes(devices: DeviceInfo[]): HostPidsNote[] {
  const notes: HostPidsNote[] = [];
  for (const d of devices) {
    if (!listsHostPids(d)) {
      continue;
    }
    const same = notes.find(n => n.reason === d.pids_reason);
    if (same) {
      same.gpus.push(d.index);
    } else {
      notes.push({ gpus: [d.index], reason: d.pids_reason });
    }
  }
  return notes;
}
