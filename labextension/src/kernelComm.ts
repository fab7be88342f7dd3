/**
 * Talking to the kernel side of jupyter_gpumem: loading it, and one comm per kernel that carries
 * snapshot requests, their answers and the kernel's pushes (docs/server.md, "The kernel comm").
 */

import { Kernel, KernelMessage } from '@jupyterlab/services';
import { ISignal, Signal } from '@lumino/signaling';

import { COMM_TARGET, LOAD_EXTENSION_CODE } from './constants';
import { executeSilently } from './silentExecution';
import { ExecutionError, KernelPush, KernelSnapshot } from './types';

/** `%load_ext jupyter_gpumem`, silently; resolves to the kernel's error or null. */
export function loadExtension(kernel: Kernel.IKernelConnection): Promise<ExecutionError | null> {
  return executeSilently(kernel, LOAD_EXTENSION_CODE);
}

/** The kernel did not answer in time. */
export class NoAnswerError extends Error {}

/** The kernel answered, but with an error instead of a snapshot. */
export class KernelAnswerError extends Error {
  constructor(readonly reason: string | null) {
    super(`The kernel could not answer: ${reason ?? 'no reason given'}`);
  }
}

/** What arrives on the channel. */
export type ChannelMessage =
  | { kind: 'snapshot'; snapshot: KernelSnapshot }
  | { kind: 'error'; error: KernelAnswerError }
  /** The kernel closed our comm as it opened: no `jupyter_gpumem` target, not loaded. */
  | { kind: 'not-loaded' }
  | { kind: 'push'; push: KernelPush };

/**
 * One comm to one kernel's `jupyter_gpumem` target: the panel's own, or the one the kernel opens
 * when the extension loads. At most one snapshot request is out at a time: the kernel answers
 * in order, after whatever it was running, so one answer serves every ask made meanwhile.
 */
export class SnapshotChannel {
  private _comm: Kernel.IComm | null = null;
  private _asking = false;
  private _received = new Signal<this, ChannelMessage>(this);

  constructor(private _kernel: Kernel.IKernelConnection) {
    _kernel.registerCommTarget(COMM_TARGET, this._onKernelOpen);
  }

  get kernel(): Kernel.IKernelConnection {
    return this._kernel;
  }

  /** Every answer, refusal and push, in the order the kernel sent them. */
  get received(): ISignal<this, ChannelMessage> {
    return this._received;
  }

  /** Whether a request is out and unanswered. */
  get asking(): boolean {
    return this._asking;
  }

  /** Asks for a snapshot, unless a request is already out. */
  ask(): void {
    if (this._asking) {
      return;
    }
    this._asking = true;
    this._open().send({ request: 'snapshot' });
  }

  /** Forgets the unanswered request (a late answer still arrives); the next ask sends anew. */
  giveUp(): void {
    this._asking = false;
  }

  /** The kernel restarted: its comms are gone (KernelConnection._clearKernelState). */
  reset(): void {
    this._comm = null;
    this._asking = false;
  }

  dispose(): void {
    Signal.clearData(this);
    this._kernel.removeCommTarget(COMM_TARGET, this._onKernelOpen);
    if (this._comm && !this._comm.isDisposed) {
      try {
        this._comm.close();
      } catch {
        // the kernel is gone already
      }
    }
    this._comm = null;
  }

  /** The kernel opened a comm to us (at %load_ext): keep it unless ours is still open. */
  private _onKernelOpen = (comm: Kernel.IComm, msg: KernelMessage.ICommOpenMsg): void => {
    if (this._comm && !this._comm.isDisposed) {
      comm.close();
    } else {
      this._use(comm);
    }
    this._deliver(msg.content.data);
  };

  private _open(): Kernel.IComm {
    if (this._comm && !this._comm.isDisposed) {
      return this._comm;
    }
    const comm = this._kernel.createComm(COMM_TARGET);
    this._use(comm);
    comm.open({});
    return comm;
  }

  private _use(comm: Kernel.IComm): void {
    comm.onMsg = (msg: KernelMessage.ICommMsgMsg) => this._deliver(msg.content.data);
    comm.onClose = () => {
      if (this._comm === comm) {
        this._comm = null;
      }
      if (this._asking) {
        this._asking = false;
        this._received.emit({ kind: 'not-loaded' });
      }
    };
    this._comm = comm;
  }

  private _deliver(raw: unknown): void {
    const data = raw as any;
    if (!data || typeof data !== 'object') {
      return;
    }
    if (data.type === 'snapshot') {
      this._asking = false;
      this._received.emit({ kind: 'snapshot', snapshot: data as KernelSnapshot });
    } else if (data.type === 'error') {
      // The kernel answered but could not make a snapshot: say why, don't wait for a timeout.
      this._asking = false;
      const error = new KernelAnswerError(data.error ? String(data.error) : null);
      this._received.emit({ kind: 'error', error });
    } else if (data.type === 'event') {
      this._received.emit({ kind: 'push', push: data as KernelPush });
    }
  }
}
