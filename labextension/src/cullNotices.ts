/**
 * The server's pending culls (GpuMem.cull_idle_after, docs/server.md "Culling idle GPU
 * holders") as notifications: one per kernel and cull time, so a kernel that was active and
 * became idle again is announced again, and a reading that repeats the same pending cull is not.
 */

import { DevicesReply } from './types';

export interface CullNotice {
  /** kernel id and cull time: the same pending cull always has the same key. */
  key: string;
  message: string;
}

/** The pending culls in `reply` not yet in `shown`, one per kernel, each named by its notebook. */
export function newCullNotices(
  reply: DevicesReply | null,
  shown: ReadonlySet<string>
): CullNotice[] {
  const out: CullNotice[] = [];
  const seen = new Set<string>();
  if (!reply || reply.state !== 'ok') {
    return out;
  }
  for (const device of reply.devices) {
    if (!device.readable) {
      continue;
    }
    for (const proc of device.processes) {
      const pending = proc.pending_cull;
      if (proc.kind !== 'kernel' || !proc.kernel_id || !pending) {
        continue;
      }
      const key = `${proc.kernel_id}@${pending.cull_at}`;
      if (shown.has(key) || seen.has(key)) {
        continue;
      }
      seen.add(key);
      const who = proc.notebook_path ?? `kernel ${proc.kernel_id}`;
      out.push({ key, message: `${who}: ${pending.message}` });
    }
  }
  return out;
}
