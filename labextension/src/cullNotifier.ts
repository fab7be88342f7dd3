/**
 * The cull's notifications (JupyterLab's Notification API): one per kernel pending a cull, whose
 * text counts down once a second in place (`Notification.update`), with "Keep running" and
 * "Open notebook"; once the kernel was shut down, the same notification (or a new one, where the
 * page missed the moment) says why, what it freed and how to get its state back.
 */

import { Notification } from '@jupyterlab/apputils';
import { TranslationBundle } from '@jupyterlab/translation';

import { keepKernel } from './api';
import {
  afterPending,
  countdownText,
  kernelName,
  opensAgain,
  PendingKernel,
  pendingKernels,
  shutdownText
} from './cullNotices';
import { DevicesModel } from './models/devicesModel';
import { CullRecord, Units } from './types';

export interface CullNotifierOptions {
  devices: DevicesModel;
  trans: TranslationBundle;
  units: () => Units;
  openNotebook: (path: string) => void;
}

/** One kernel's pending cull as announced: its notification, and whether that was closed. */
interface Announced {
  pending: PendingKernel;
  id: string | null;
  closed: boolean;
  kept: boolean;
}

/** A record's "culled at" is seen this long without its record before the notice gives up. */
const WAIT_FOR_RECORD_S = 60;

export class CullNotifier {
  private _announced = new Map<string, Announced>();
  private _culls = new Set<string>();
  private _timer: number | null = null;

  constructor(private _o: CullNotifierOptions) {
    _o.devices.changed.connect(this._read, this);
  }

  dispose(): void {
    this._o.devices.changed.disconnect(this._read, this);
    this._stopTicking();
  }

  private _serverNow(): number {
    return (Date.now() + this._o.devices.serverOffsetMs) / 1000;
  }

  private _read(): void {
    const reply = this._o.devices.reply;
    const now = this._serverNow();
    const pending = pendingKernels(reply);
    for (const p of pending) {
      this._announce(p);
    }
    const listed = new Set(pending.map(p => p.kernelId));
    for (const [kernelId, a] of this._announced) {
      if (listed.has(kernelId)) {
        continue;
      }
      const after = afterPending(reply, kernelId, a.pending.pending.cull_at, now);
      if (after.kind === 'culled') {
        this._announced.delete(kernelId);
        this._sayCulled(after.record, a.closed ? null : a.id);
      } else if (after.kind === 'over' || now > a.pending.pending.cull_at + WAIT_FOR_RECORD_S) {
        this._announced.delete(kernelId);
        if (a.id && !a.closed) {
          Notification.dismiss(a.id);
        }
      }
    }
    // Culls the page missed (it was closed, or asleep): said once each.
    for (const record of reply?.recent_culls ?? []) {
      this._sayCulled(record, null);
    }
    this._tick();
  }

  private _announce(p: PendingKernel): void {
    const a = this._announced.get(p.kernelId);
    if (a && !opensAgain(a.closed, a.kept, a.pending.pending.cull_at, p.pending.cull_at)) {
      a.pending = p; // the same notification, counting to the new time
      return;
    }
    const fresh: Announced = { pending: p, id: null, closed: false, kept: false };
    fresh.id = Notification.warning(this._countdown(p), {
      autoClose: false,
      actions: this._actions(fresh)
    });
    this._announced.set(p.kernelId, fresh);
  }

  private _countdown(p: PendingKernel): string {
    return countdownText(p, this._serverNow(), this._o.units(), this._o.trans);
  }

  private _actions(a: Announced): Notification.IAction[] {
    const { trans } = this._o;
    const actions: Notification.IAction[] = [
      {
        label: trans.__('Keep running'),
        caption: trans.__(
          'Start its idle time again: it is shut down only once idle as long again'
        ),
        displayType: 'accent',
        callback: () => void this._keep(a)
      }
    ];
    const path = a.pending.notebookPath;
    if (path) {
      actions.push({
        label: trans.__('Open notebook'),
        caption: trans.__('Open %1', path),
        callback: event => {
          event.preventDefault(); // the countdown stays on screen
          this._o.openNotebook(path);
        }
      });
    }
    return actions;
  }

  private async _keep(a: Announced): Promise<void> {
    const { trans } = this._o;
    a.closed = true;
    a.kept = true;
    const name = kernelName(a.pending.notebookPath, a.pending.kernelId);
    try {
      const answer = await keepKernel(a.pending.kernelId);
      Notification.success(trans.__('%1: %2.', name, answer.message), { autoClose: 6000 });
    } catch (error) {
      Notification.error(trans.__('%1 could not be kept running: %2', name, String(error)), {
        autoClose: false
      });
    }
    this._o.devices.refresh();
  }

  private _sayCulled(record: CullRecord, id: string | null): void {
    const key = `${record.kernel_id}@${record.culled_at}`;
    if (this._culls.has(key)) {
      return;
    }
    this._culls.add(key);
    const message = shutdownText(record, this._o.units(), this._o.trans);
    const path = record.notebook_path;
    const actions: Notification.IAction[] = path
      ? [{ label: this._o.trans.__('Open notebook'), callback: () => this._o.openNotebook(path) }]
      : [];
    const options = { autoClose: false as const, actions };
    if (!(id && Notification.update({ id, message, type: 'info', ...options }))) {
      Notification.info(message, options);
    }
  }

  /** Counts every open countdown down, once a second while there is one. */
  private _tick(): void {
    let open = false;
    for (const a of this._announced.values()) {
      if (a.closed || a.id === null) {
        continue;
      }
      // update() is false once the user closed it: closed until the kernel is active again.
      a.closed = !Notification.update({
        id: a.id,
        message: this._countdown(a.pending),
        type: 'warning',
        autoClose: false,
        actions: this._actions(a)
      });
      open = open || !a.closed;
    }
    if (open && this._timer === null) {
      this._timer = window.setInterval(() => this._tick(), 1000);
    } else if (!open) {
      this._stopTicking();
    }
  }

  private _stopTicking(): void {
    if (this._timer !== null) {
      window.clearInterval(this._timer);
      this._timer = null;
    }
  }
}
