/**
 * The server's pending culls and recent culls (GpuMem.cull_idle_after, docs/server.md "Culling
 * idle GPU holders") as a user meets them: which kernel is pending a cull and when, in words
 * that count down, and what to say once it was shut down. Pure: the notifications themselves
 * are `cullNotifier.ts`'s.
 *
 * Times are the server's POSIX seconds. The page's clock may differ from the server's, so a
 * reply's `t` (when its reading was taken) is tied to the moment the page received it
 * (`serverOffsetMs`), and the countdown runs on the page's clock from there.
 */

import { Translate } from './translation';

import { formatBytes } from './format';
import { CullRecord, DevicesReply, PendingCull, Units } from './types';

/** One kernel's pending cull, however many GPUs it holds memory on. */
export interface PendingKernel {
  kernelId: string;
  notebookPath: string | null;
  pending: PendingCull;
  /** The server's time at which its idle time began (its last activity, or its last keep). */
  idleSince: number;
}

/** Toasts cut a message at 140 characters: a notebook's name is cut well before. */
const MAX_NAME = 24;

/** The pending culls in `reply`, one per kernel (a kernel on two GPUs has a row on each). */
export function pendingKernels(reply: DevicesReply | null): PendingKernel[] {
  const out = new Map<string, PendingKernel>();
  if (!reply || reply.state !== 'ok') {
    return [];
  }
  for (const device of reply.devices) {
    if (!device.readable) {
      continue;
    }
    for (const proc of device.processes) {
      const pending = proc.pending_cull;
      if (proc.kind !== 'kernel' || !proc.kernel_id || !pending || out.has(proc.kernel_id)) {
        continue;
      }
      if (cullRecordOf(reply, proc.kernel_id)) {
        continue; // culled: a row the server's kernel list has not dropped yet is not pending
      }
      out.set(proc.kernel_id, {
        kernelId: proc.kernel_id,
        notebookPath: proc.notebook_path,
        pending,
        idleSince: reply.t - pending.idle_seconds
      });
    }
  }
  return [...out.values()];
}

/** Whether `reply` lists a process of the kernel on any GPU. */
export function kernelListed(reply: DevicesReply | null, kernelId: string): boolean {
  return !!reply?.devices.some(d => d.readable && d.processes.some(p => p.kernel_id === kernelId));
}

/** The record of the kernel's cull in `reply`, if the server has one. */
export function cullRecordOf(reply: DevicesReply | null, kernelId: string): CullRecord | null {
  return reply?.recent_culls?.find(r => r.kernel_id === kernelId) ?? null;
}

/** Milliseconds to add to the page's clock to read the server's: `t` was read at `receivedMs`. */
export function serverOffsetMs(t: number, receivedMs: number): number {
  return t * 1000 - receivedMs;
}

/** "45 s", "12 min", "3.2 h", as the server words a duration (culling.human_duration). */
export function durationText(seconds: number): string {
  const s = Math.max(0, seconds);
  if (s < 90) {
    return `${Math.round(s)} s`;
  }
  if (s < 2 * 3600) {
    return `${Math.round(s / 60)} min`;
  }
  return `${(s / 3600).toFixed(1)} h`;
}

/** The notebook's file name (or the kernel's id), cut to fit a toast. */
export function kernelName(notebookPath: string | null, kernelId: string): string {
  const name = notebookPath ? (notebookPath.split('/').pop() as string) : `kernel ${kernelId}`;
  return name.length <= MAX_NAME ? name : `${name.slice(0, MAX_NAME - 1)}…`;
}

function heldText(
  bytes: number,
  perDevice: [number, number][] | undefined,
  units: Units,
  trans: Translate
): string {
  const size = formatBytes(bytes, units);
  if (perDevice && perDevice.length === 1) {
    return trans.__('%1 of GPU %2', size, perDevice[0][0]);
  }
  return perDevice && perDevice.length > 1
    ? trans.__('%1 on %2 GPUs', size, perDevice.length)
    : trans.__('%1 of GPU memory', size);
}

/** "a.ipynb: idle 14 s, holding 20.0 GiB of GPU 2. Its kernel will be shut down in 46 s." */
export function countdownText(
  p: PendingKernel,
  serverNow: number,
  units: Units,
  trans: Translate
): string {
  const name = kernelName(p.notebookPath, p.kernelId);
  const idle = durationText(serverNow - p.idleSince);
  const held = heldText(p.pending.held_bytes, p.pending.per_device, units, trans);
  const left = p.pending.cull_at - serverNow;
  return left >= 0.5
    ? trans.__(
        '%1: idle %2, holding %3. Its kernel will be shut down in %4.',
        name,
        idle,
        held,
        durationText(left)
      )
    : trans.__('%1: idle %2, holding %3. Its kernel is being shut down now.', name, idle, held);
}

/** "shut down in 42 s" for the kernel's row; "shutting down" once the time has come. */
export function badgeText(pending: PendingCull, serverNow: number, trans: Translate): string {
  const left = pending.cull_at - serverNow;
  return left >= 0.5 ? trans.__('shut down in %1', durationText(left)) : trans.__('shutting down');
}

/** What to say once the kernel was shut down: why, what it freed, how to get its state back. */
export function shutdownText(record: CullRecord, units: Units, trans: Translate): string {
  return trans.__(
    '%1: kernel shut down after %2 idle; %3 freed. Rerun the notebook to get its variables back.',
    kernelName(record.notebook_path, record.kernel_id),
    durationText(record.idle_seconds),
    heldText(record.freed_bytes, record.per_device, units, trans)
  );
}

/** What a reading means for a kernel whose pending cull was being announced and is no longer. */
export type AfterPending =
  /** The server's record says it was culled. */
  | { kind: 'culled'; record: CullRecord }
  /** Gone from the reading at or after its cull time, no record yet: the record is on its way. */
  | { kind: 'waiting' }
  /** Active again, kept, or shut down by someone before its time: nothing more to say. */
  | { kind: 'over' };

export function afterPending(
  reply: DevicesReply | null,
  kernelId: string,
  cullAt: number,
  serverNow: number
): AfterPending {
  const record = cullRecordOf(reply, kernelId);
  if (record) {
    return { kind: 'culled', record };
  }
  return !kernelListed(reply, kernelId) && serverNow >= cullAt - 1
    ? { kind: 'waiting' }
    : { kind: 'over' };
}

/**
 * Whether a pending cull at `cullAt` opens a new notification for a kernel whose last one
 * announced `announcedAt` and was `closed` (by the user, or by "Keep running"). An open one is
 * updated in place whatever the new time (the panel's own question to the kernel moves its last
 * activity a little); a closed one stays closed unless the user kept the kernel and a later cull
 * is now pending.
 */
export function opensAgain(
  closed: boolean,
  kept: boolean,
  announcedAt: number,
  cullAt: number
): boolean {
  return closed && kept && cullAt > announcedAt + 1;
}
