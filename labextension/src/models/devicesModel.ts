/**
 * The GPUs as the server reports them, polled while the panel is on screen. Views render
 * `reply` and `error` and re-render on `changed`.
 */

import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import { fetchDevices } from '../api';
import { pollFrequency } from '../panelOptions';
import { asError } from './asError';
import { DevicesReply } from '../types';

export interface DevicesModelOptions {
  pollSeconds: number;
  /** The active notebook's path, read at each request; null when no notebook is active. */
  notebookPath: () => string | null;
  /** When to stand by, as Poll takes it: `() => !widget.isVisible || 'when-hidden'`. */
  standby: () => boolean | Poll.Standby;
}

export class DevicesModel {
  private _reply: DevicesReply | null = null;
  private _error: Error | null = null;
  private _changed = new Signal<this, void>(this);
  private _poll: Poll<DevicesReply, Error>;

  constructor(options: DevicesModelOptions) {
    this._poll = new Poll<DevicesReply, Error>({
      name: 'jupyter-gpumem:devices',
      factory: () => fetchDevices(options.notebookPath()),
      frequency: pollFrequency(options.pollSeconds),
      standby: options.standby
    });
    // Poll drops the answer of a request overtaken by refresh(): read answers from its ticks.
    this._poll.ticked.connect((_, state) => {
      if (state.phase === 'resolved' || state.phase === 'reconnected') {
        this._reply = state.payload as DevicesReply;
        this._error = null;
        this._changed.emit();
      } else if (state.phase === 'rejected') {
        this._error = asError(state.payload);
        this._changed.emit();
      }
    });
  }

  /** Emitted on each new reply or failure. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** The latest reply; kept through failures that follow it. */
  get reply(): DevicesReply | null {
    return this._reply;
  }

  /** The latest failure, or null once a request succeeds again. */
  get error(): Error | null {
    return this._error;
  }

  set pollSeconds(seconds: number) {
    this._poll.frequency = pollFrequency(seconds);
  }

  /** Asks now (the active notebook changed, or the panel came back on screen). */
  refresh(): void {
    void this._poll.refresh();
  }

  get isDisposed(): boolean {
    return this._poll.isDisposed;
  }

  dispose(): void {
    this._poll.dispose();
    Signal.clearData(this);
  }
}
