import { Kernel, KernelMessage } from '@jupyterlab/services';

import { COMM_TARGET, LOAD_EXTENSION_CODE } from './constants';
import { executeSilently } from './notebookSettings';
import { KernelSnapshot } from './types';

export function loadExtension(
  kernel: Kernel.IKernelConnection
): Promise<string | null> {
  return executeSilently(kernel, LOAD_EXTENSION_CODE);
}

/** The kernel closed our comm at once: no `jupyter_gpumem` target, extension not loaded. */
export class NotLoadedError extends Error {}

/** One comm per kernel to the kernel side's `jupyter_gpumem` target. */
export class SnapshotChannel {
  private _comm: Kernel.IComm | null = null;
  private _waiters: Array<{
    resolve: (s: KernelSnapshot) => void;
    reject: (e: Error) => void;
  }> = [];

  constructor(private _kernel: Kernel.IKernelConnection) {}

  get kernel(): Kernel.IKernelConnection {
    return this._kernel;
  }

  /** Asks for a snapshot; rejects after `timeoutMs` (the kernel may be busy). */
  request(timeoutMs: number): Promise<KernelSnapshot> {
    const comm = this._open();
    return new Promise<KernelSnapshot>((resolve, reject) => {
      const timer = window.setTimeout(() => {
        this._waiters = this._waiters.filter(w => w !== waiter);
        reject(new Error('The kernel did not answer in time; it may be busy.'));
      }, timeoutMs);
      const waiter = {
        resolve: (s: KernelSnapshot) => {
          window.clearTimeout(timer);
          resolve(s);
        },
        reject: (e: Error) => {
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

  private _open(): Kernel.IComm {
    if (this._comm && !this._comm.isDisposed) {
      return this._comm;
    }
    const comm = this._kernel.createComm(COMM_TARGET);
    comm.onMsg = (msg: KernelMessage.ICommMsgMsg) => {
      const data = msg.content.data as any;
      if (data && (data.type === 'snapshot' || data.type === 'error')) {
        const waiters = this._waiters;
        this._waiters = [];
        if (data.type === 'snapshot') {
          waiters.forEach(w => w.resolve(data as KernelSnapshot));
        } else {
          // The kernel answered but could not make a snapshot: say why, don't wait for a timeout.
          const why = new Error(`The kernel could not answer: ${data.error ?? 'no reason given'}`);
          waiters.forEach(w => w.reject(why));
        }
      }
    };
    comm.onClose = () => {
      this._comm = null;
      const waiters = this._waiters;
      this._waiters = [];
      waiters.forEach(w =>
        w.reject(new NotLoadedError('jupyter_gpumem is not loaded in this kernel.'))
      );
    };
    comm.open({});
    this._comm = comm;
    return comm;
  }
}
