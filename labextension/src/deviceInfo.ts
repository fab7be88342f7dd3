/** Who holds a GPU's memory, and which kernels hold some: pure arithmetic over the devices reply. */

import { DeviceInfo, ProcessInfo, ReadableDevice } from './types';

/** A readable GPU's memory split five ways; the parts add up to `used + free`. */
export interface MemoryShares {
  thisNotebook: number;
  otherKernels: number;
  /** Processes NVML lists by host pids (a container): kernels of this server or not, it cannot tell. */
  hostPids: number;
  /** Memory NVML counts as used that no kernel holds: other processes, the driver, the display. */
  otherProcesses: number;
  free: number;
}

/** The five shares of a readable GPU. None is negative, even when the counts disagree. */
export function memoryShares(d: ReadableDevice): MemoryShares {
  const thisNotebook = Math.max(d.this_kernel_bytes, 0);
  const otherKernels = Math.max(d.kernels_bytes - thisNotebook, 0);
  const hostPids = Math.max(d.host_pid_bytes ?? 0, 0);
  const otherProcesses = Math.max(d.used - thisNotebook - otherKernels - hostPids, 0);
  return { thisNotebook, otherKernels, hostPids, otherProcesses, free: Math.max(d.free, 0) };
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
