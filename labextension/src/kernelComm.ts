/** Talking to the kernel side of jupyter_gpumem: loading it, and one comm per kernel for snapshots. */

import { Kernel, KernelMessage } from '@jupyterlab/services';

import { COMM_TARGET, LOAD_EXTENSION_CODE } from './constants';
import { executeSilently } from './silentExecution';
import { ExecutionError, KernelSnapshot } from './types';

/** `%load_ext jupyter_gpumem`, silently; resolves to the kernel's error or null. */
export function loadExtension(
  kernel: Kernel.IKernelConnection
): Promise<ExecutionError | null> {
  return executeSilently(kernel, LOAD_EXTENSION_CODE);
}

/** The kernel closed our comm at once: no `jupyter_gpumem` target, extension not loaded. */
export class NotLoadedError extends Error {}

/** The kernel did not answer in time. */
export class NoAnswerError extends Error {}

/** The kernel answered, but with an error instead of a snapshot. */
export class KernelAnswerError extends Error {
  constructor(readonly reason: string | null) {
    super(`The kernel could not answer: ${reason ?? 'no reason given'}`);
  }
}

interface Waiter {
  resolve: (s: KernelSnapshot) => void;
  reject: (e: Error) => void;
}

/** One comm per kernel to the kernel side's `jupyter_gpumem` target. */
export class SnapshotChannel {
  private _comm: Kernel.IComm | null = null;
  private _waiters: Waiter[] = [];

  constructor(private _kernel: Kernel.IKernelConnection) {}

  get kernel(): Kernel.IKernelConnection {
    return this._kernel;
  }

  /** Asks for a snapshot; rejects with NoAnswerError after `timeoutMs`. */
  request(timeoutMs: number): Promise<KernelSnapshot> {
    const comm = this._open();
    return new Promise<KernelSnapshot>((resolve, reject) => {
      const timer = window.setTimeout(() => {
        this._waiters = this._waiters.filter(w => w !== waiter);
        reject(new NoAnswerError('The kernel did not answer in time.'));
      }, timeoutMs);
      const waiter: Waiter = {
        resolve: s => {
          window.clearTimeout(timer);
          resolve(s);
        },
        reject: e => {
          window.clearTimeout(timer);
          reject(e);
        }
      };
      this._waiters.push(waiter);
      comm.send({ request: 'snapshot' });
    });
  }

  dispose(): void {
    if (this._comm && !this._comm.isDisposed) {
      try {
        this._comm.close();
      } catch {
        // the kernel is gone already
      }
    }
    this._comm = null;
  }

  private _settle(settle: (w: Waiter) => void): void {
    const waiters = this._waiters;
    this._waiters = [];
    waiters.forEach(settle);
  }

  private _open(): Kernel.IComm {
    if (this._comm && !this._comm.isDisposed) {
      return this._comm;
    }
    const comm = this._kernel.createComm(COMM_TARGET);
    comm.onMsg = (msg: KernelMessage.ICommMsgMsg) => {
      const data = msg.content.data as any;
      if (data && data.type === 'snapshot') {
        this._settle(w => w.resolve(data as KernelSnapshot));
      } else if (data && data.type === 'error') {
        // The kernel answered but could not make a snapshot: say why, don't wait for a timeout.
        const why = new KernelAnswerError(data.error ? String(data.error) : null);
        this._settle(w => w.reject(why));
      }
    };
    comm.onClose = () => {
      this._comm = null;
      this._settle(w => w.reject(new NotLoadedError('jupyter_gpumem is not loaded in this kernel.')));
    };
    comm.open({});
    this._comm = comm;
    return comm;
  }
}
