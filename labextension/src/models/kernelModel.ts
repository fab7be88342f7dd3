/**
 * The active notebook's kernel as the panel sees it: its state, and JAX's allocator as the
 * kernel's snapshot reports it, polled while the panel is on screen. Views render `state`,
 * `lastSnapshot` and `loadError` and re-render on `changed`.
 */

import { NotebookPanel } from '@jupyterlab/notebook';
import { Kernel } from '@jupyterlab/services';
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import { NOT_LOADED_RETRY_MS, SNAPSHOT_TIMEOUT_MS } from '../constants';
import { loadExtension, NotLoadedError, SnapshotChannel } from '../kernelComm';
import { pollFrequency } from '../panelOptions';
import { asError } from './asError';
import { asExecutionError } from '../silentExecution';
import { ExecutionError, KernelSnapshot } from '../types';

export type KernelState =
  /** Nothing heard yet. */
  | { kind: 'asking' }
  | { kind: 'no-kernel' }
  | { kind: 'dead' }
  | { kind: 'restarting'; status: string }
  | { kind: 'not-loaded' }
  /** Running a cell: the kernel answers only after it, so the panel does not ask. */
  | { kind: 'busy' }
  | { kind: 'snapshot'; snapshot: KernelSnapshot }
  /** No answer in time, or an error answer; the poll backs off. */
  | { kind: 'failed'; error: Error };

const STARTING = ['restarting', 'autorestarting', 'starting', 'unknown'];

interface Answer {
  kernel: Kernel.IKernelConnection | null;
  state: KernelState;
}

export interface KernelModelOptions {
  pollSeconds: number;
  /** When to stand by, as Poll takes it: `() => !widget.isVisible || 'when-hidden'`. */
  standby: () => boolean | Poll.Standby;
}

export class KernelModel {
  private _panel: NotebookPanel | null = null;
  private _state: KernelState = { kind: 'asking' };
  private _last: { kernel: Kernel.IKernelConnection; snapshot: KernelSnapshot } | null = null;
  private _loadError: ExecutionError | null = null;
  private _channel: SnapshotChannel | null = null;
  private _notLoadedAt: { kernel: Kernel.IKernelConnection; at: number } | null = null;
  private _changed = new Signal<this, void>(this);
  private _poll: Poll<Answer, Error>;

  constructor(options: KernelModelOptions) {
    this._poll = new Poll<Answer, Error>({
      name: 'jupyter-gpumem:kernel',
      factory: () => this._ask(),
      frequency: pollFrequency(options.pollSeconds),
      standby: options.standby
    });
    // Poll drops the answer of a request overtaken by refresh(): read answers from its ticks.
    this._poll.ticked.connect((_, tick) => {
      if (tick.phase === 'resolved' || tick.phase === 'reconnected') {
        const { kernel, state } = tick.payload as Answer;
        if (state.kind === 'snapshot' && kernel) {
          this._last = { kernel, snapshot: state.snapshot };
        } else if (kernel !== this._last?.kernel) {
          this._last = null;
        }
        this._set(state);
      } else if (tick.phase === 'rejected') {
        this._set({ kind: 'failed', error: asError(tick.payload) });
      }
    });
  }

  /** Emitted when the state, the last snapshot or the load error changes. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** The notebook whose kernel is watched. Setting another starts afresh and asks at once. */
  get notebook(): NotebookPanel | null {
    return this._panel;
  }

  set notebook(panel: NotebookPanel | null) {
    if (panel === this._panel) {
      return;
    }
    this._panel = panel;
    this._channel?.dispose();
    this._channel = null;
    this._last = null;
    this._notLoadedAt = null;
    this._loadError = null;
    this._set({ kind: 'asking' });
    this.refresh();
  }

  get state(): KernelState {
    return this._state;
  }

  /** The latest snapshot of the current kernel, kept while it is busy or does not answer. */
  get lastSnapshot(): KernelSnapshot | null {
    return this._last?.snapshot ?? null;
  }

  /** Why the last `load()` failed; null when it worked or was not tried. */
  get loadError(): ExecutionError | null {
    return this._loadError;
  }

  set pollSeconds(seconds: number) {
    this._poll.frequency = pollFrequency(seconds);
  }

  /** Loads jupyter_gpumem in the kernel (this does not start JAX), then asks again. */
  async load(): Promise<void> {
    const panel = this._panel;
    const kernel = panel?.sessionContext.session?.kernel;
    if (!kernel) {
      return;
    }
    let error: ExecutionError | null;
    try {
      error = await loadExtension(kernel);
    } catch (e) {
      error = asExecutionError(e);
    }
    if (panel !== this._panel) {
      return;
    }
    this._loadError = error;
    this._notLoadedAt = null;
    this._changed.emit();
    this.refresh();
  }

  /** Asks now (the panel came back on screen, or something changed). */
  refresh(): void {
    void this._poll.refresh();
  }

  get isDisposed(): boolean {
    return this._poll.isDisposed;
  }

  dispose(): void {
    this._poll.dispose();
    this._channel?.dispose();
    Signal.clearData(this);
  }

  private _set(state: KernelState): void {
    this._state = state;
    this._changed.emit();
  }

  /** One poll: the kernel's state without asking it where that says enough, else a snapshot. */
  private async _ask(): Promise<Answer> {
    const kernel = this._panel?.sessionContext.session?.kernel ?? null;
    if (!kernel) {
      return { kernel, state: { kind: 'no-kernel' } };
    }
    if (kernel.status === 'dead') {
      return { kernel, state: { kind: 'dead' } };
    }
    if (STARTING.includes(kernel.status)) {
      return { kernel, state: { kind: 'restarting', status: kernel.status } };
    }
    if (kernel.status === 'busy') {
      return { kernel, state: { kind: 'busy' } };
    }
    const skip = this._notLoadedAt;
    if (skip && skip.kernel === kernel && Date.now() - skip.at < NOT_LOADED_RETRY_MS) {
      return { kernel, state: { kind: 'not-loaded' } };
    }
    if (!this._channel || this._channel.kernel !== kernel) {
      this._channel?.dispose();
      this._channel = new SnapshotChannel(kernel);
    }
    try {
      const snapshot = await this._channel.request(SNAPSHOT_TIMEOUT_MS);
      this._notLoadedAt = null;
      return { kernel, state: { kind: 'snapshot', snapshot } };
    } catch (error) {
      if (error instanceof NotLoadedError) {
        this._notLoadedAt = { kernel, at: Date.now() };
        return { kernel, state: { kind: 'not-loaded' } };
      }
      throw error;
    }
  }
}
