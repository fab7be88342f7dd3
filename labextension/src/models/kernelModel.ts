/**
 * The active notebook's kernel as the panel sees it: its state, and JAX's allocator as the
 * kernel's snapshot reports it. Nothing here polls the kernel: the panel asks for a snapshot
 * when it is opened, when the notebook's kernel changes or restarts, and when the kernel pushes
 * that something may have changed (at %load_ext and after each cell; kernel_comm.py). Whether a
 * cell runs is read from the kernel's own status messages, which cost the kernel nothing.
 * Views render `state`, `lastSnapshot` and `loadError` and re-render on `changed`.
 */

import { ISessionContext } from '@jupyterlab/apputils';
import { NotebookPanel } from '@jupyterlab/notebook';
import { Kernel, KernelMessage } from '@jupyterlab/services';
import { ISignal, Signal } from '@lumino/signaling';

import { SNAPSHOT_TIMEOUT_MS, snapshotRetryDelayMs } from '../constants';
import { ChannelMessage, loadExtension, NoAnswerError, SnapshotChannel } from '../kernelComm';
import { asExecutionError } from '../silentExecution';
import { ExecutionError, KernelSnapshot } from '../types';

export type KernelState =
  /** Nothing heard yet. */
  | { kind: 'asking' }
  | { kind: 'no-kernel' }
  | { kind: 'dead' }
  | { kind: 'restarting'; status: string }
  | { kind: 'not-loaded' }
  /** Running a cell: the kernel answers when it ends; `lastSnapshot` is what was last seen. */
  | { kind: 'busy' }
  | { kind: 'snapshot'; snapshot: KernelSnapshot }
  /** An error answer, or no answer in time from a kernel that ran no cell. */
  | { kind: 'failed'; error: Error };

const STARTING = ['restarting', 'autorestarting', 'starting', 'unknown'];

export interface KernelModelOptions {
  /** Whether anyone looks (the panel or the status bar item is on screen). */
  isWatched: () => boolean;
}

export class KernelModel {
  private _panel: NotebookPanel | null = null;
  private _kernel: Kernel.IKernelConnection | null = null;
  private _channel: SnapshotChannel | null = null;
  private _base: KernelState = { kind: 'asking' };
  private _last: { snapshot: KernelSnapshot; at: Date } | null = null;
  private _loadError: ExecutionError | null = null;
  /** The execute requests the kernel is running (from its status messages on iopub). */
  private _running = new Set<string>();
  private _timer: number | null = null;
  /** Asks again after an unanswered request, while someone looks. */
  private _retryTimer: number | null = null;
  private _unanswered = 0;
  private _changed = new Signal<this, void>(this);
  private _disposed = false;

  constructor(private _options: KernelModelOptions) {}

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
    this._panel?.sessionContext.kernelChanged.disconnect(this._onKernelChanged, this);
    this._panel = panel;
    panel?.sessionContext.kernelChanged.connect(this._onKernelChanged, this);
    this._loadError = null;
    this._attach(panel?.sessionContext.session?.kernel ?? null);
  }

  /** What the panel shows: while a cell runs, "busy" instead of a snapshot or a failure. */
  get state(): KernelState {
    const base = this._base;
    if (this._cellRunning() && ['snapshot', 'failed', 'asking'].includes(base.kind)) {
      return { kind: 'busy' };
    }
    return base;
  }

  /** The latest snapshot of the current kernel, kept while it is busy or does not answer. */
  get lastSnapshot(): KernelSnapshot | null {
    return this._last?.snapshot ?? null;
  }

  /** When the latest snapshot arrived. */
  get lastSnapshotAt(): Date | null {
    return this._last?.at ?? null;
  }

  /** Why the last `load()` failed; null when it worked or was not tried. */
  get loadError(): ExecutionError | null {
    return this._loadError;
  }

  /** Loads jupyter_gpumem in the kernel (this does not start JAX), then asks again. */
  async load(): Promise<void> {
    const panel = this._panel;
    const kernel = this._kernel;
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
    this._changed.emit();
    this._ask();
  }

  /** Asks now: someone started looking. */
  refresh(): void {
    this._ask();
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    this.notebook = null;
    Signal.clearData(this);
  }

  private _onKernelChanged(
    _: ISessionContext,
    change: { oldValue: Kernel.IKernelConnection | null; newValue: Kernel.IKernelConnection | null }
  ): void {
    // restartKernel() reports the same connection as changed; its status says it restarted.
    if (change.newValue !== this._kernel) {
      this._attach(change.newValue);
    }
  }

  private _attach(kernel: Kernel.IKernelConnection | null): void {
    if (this._kernel) {
      this._kernel.statusChanged.disconnect(this._onStatus, this);
      this._kernel.iopubMessage.disconnect(this._onIopub, this);
    }
    this._channel?.dispose();
    this._channel = null;
    this._clearTimer();
    this._unanswered = 0;
    this._kernel = kernel;
    this._last = null;
    this._running.clear();
    if (!kernel) {
      this._set({ kind: 'no-kernel' });
      return;
    }
    kernel.statusChanged.connect(this._onStatus, this);
    kernel.iopubMessage.connect(this._onIopub, this);
    this._channel = new SnapshotChannel(kernel);
    this._channel.received.connect(this._onReceived, this);
    this._base = { kind: 'asking' };
    this._onStatus(kernel, kernel.status);
    this._ask();
  }

  private _onStatus(kernel: Kernel.IKernelConnection, status: Kernel.Status): void {
    if (status === 'dead') {
      this._running.clear();
      this._set({ kind: 'dead' });
    } else if (STARTING.includes(status)) {
      // A new process: what was known of the old one no longer holds.
      this._running.clear();
      this._last = null;
      this._channel?.reset();
      this._clearTimer();
      this._set({ kind: 'restarting', status });
    } else if (this._base.kind === 'restarting' || this._base.kind === 'dead') {
      this._set({ kind: 'asking' });
      this._ask();
    }
  }

  /**
   * Whether a cell runs: an execute request seen starting on iopub, or a code cell of this
   * notebook marked running (CodeCell.execute sets the model's executionState, @jupyterlab/cells
   * 4.6), which also covers a cell that began before this model watched. The kernel's status
   * alone cannot tell: it read "idle" while a cell slept (ipykernel 7.4, panel.world.spec.ts).
   */
  private _cellRunning(): boolean {
    if (this._running.size > 0) {
      return true;
    }
    const cells = this._panel?.content.model?.cells;
    if (!cells) {
      return false;
    }
    for (const cell of cells) {
      if ((cell as { executionState?: string }).executionState === 'running') {
        return true;
      }
    }
    return false;
  }

  /** A cell starts or ends: the kernel's busy and idle status messages for an execute request. */
  private _onIopub(_: Kernel.IKernelConnection, msg: KernelMessage.IIOPubMessage): void {
    const parent = msg.parent_header as Partial<KernelMessage.IHeader>;
    if (
      msg.header.msg_type !== 'status' ||
      parent?.msg_type !== 'execute_request' ||
      !parent.msg_id
    ) {
      return;
    }
    const state = (msg as KernelMessage.IStatusMsg).content.execution_state;
    const before = this._running.size;
    if (state === 'busy') {
      this._running.add(parent.msg_id);
    } else if (state === 'idle') {
      this._running.delete(parent.msg_id);
      if (this._channel?.asking) {
        // A cell ended (one seen starting, or one that began before we watched): the answer
        // follows it, or the next cell's end.
        this._startTimer();
      }
    }
    if ((before === 0) !== (this._running.size === 0)) {
      this._changed.emit();
    }
  }

  private _onReceived(_: SnapshotChannel, message: ChannelMessage): void {
    switch (message.kind) {
      case 'snapshot':
        this._clearTimer();
        this._unanswered = 0;
        this._last = { snapshot: message.snapshot, at: new Date() };
        this._set({ kind: 'snapshot', snapshot: message.snapshot });
        break;
      case 'error':
        this._clearTimer();
        this._set({ kind: 'failed', error: message.error });
        break;
      case 'not-loaded':
        this._clearTimer();
        this._last = null;
        this._set({ kind: 'not-loaded' });
        break;
      case 'push':
        // Nobody looking: the next refresh() asks.
        if (this._options.isWatched()) {
          this._ask();
        }
        break;
    }
  }

  private _ask(): void {
    const kernel = this._kernel;
    if (!kernel || !this._channel || kernel.status === 'dead' || STARTING.includes(kernel.status)) {
      return;
    }
    this._channel.ask();
    if (!this._cellRunning()) {
      this._startTimer();
    }
  }

  private _startTimer(): void {
    if (this._timer !== null) {
      return;
    }
    this._timer = window.setTimeout(() => {
      this._timer = null;
      if (!this._channel?.asking) {
        return;
      }
      if (this._cellRunning()) {
        return; // answered when the cells end; the timer starts again then
      }
      this._channel.giveUp();
      this._set({ kind: 'failed', error: new NoAnswerError('The kernel did not answer in time.') });
      this._scheduleRetry();
    }, SNAPSHOT_TIMEOUT_MS);
  }

  /** A slow kernel (a long import, a busy machine) answers later: ask again, waiting longer each time. */
  private _scheduleRetry(): void {
    this._unanswered += 1;
    if (this._retryTimer !== null) {
      window.clearTimeout(this._retryTimer);
    }
    this._retryTimer = window.setTimeout(() => {
      this._retryTimer = null;
      if (this._base.kind === 'failed' && this._options.isWatched()) {
        this._ask();
      } else if (this._base.kind === 'failed') {
        this._scheduleRetry(); // nobody looks now: try later, or at refresh()
      }
    }, snapshotRetryDelayMs(this._unanswered));
  }

  private _clearTimer(): void {
    if (this._timer !== null) {
      window.clearTimeout(this._timer);
      this._timer = null;
    }
    if (this._retryTimer !== null) {
      window.clearTimeout(this._retryTimer);
      this._retryTimer = null;
    }
  }

  private _set(state: KernelState): void {
    this._base = state;
    this._changed.emit();
  }
}
