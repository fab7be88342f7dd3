/**
 * The GPUs as the server reports them, while the panel or the status bar item is on screen.
 * Views render `reply` and `error` and re-render on `changed`.
 *
 * Readings come pushed on the server's socket (`/devices/ws`): one answer when it opens, then
 * one per changed reading, so a watching page costs the server no request per interval. Where
 * no socket can be opened (a proxy that blocks websockets, a server without the route) the model
 * polls `/devices` instead, quietly: that is a working panel, not a failure (`feedAfterClose`).
 */

import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import { DevicesSocket, fetchDevices } from '../api';
import { SOCKET_ANSWER_TIMEOUT_MS } from '../constants';
import { serverOffsetMs } from '../cullNotices';
import { DevicesFeed, feedAfterClose } from '../devicesFeed';
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
  private _serverOffsetMs = 0;
  private _changed = new Signal<this, void>(this);
  private _feed: DevicesFeed = 'socket';
  private _socket: DevicesSocket | null = null;
  private _notebookPath: () => string | null;
  /**
   * One timer for both feeds. Polling, each tick asks `/devices`. On the socket, a tick only
   * makes sure a socket is open for the active notebook (no request while one is), and a
   * failed opening backs off as a failed request does.
   */
  private _poll: Poll<DevicesReply | null, Error>;

  constructor(options: DevicesModelOptions) {
    this._notebookPath = options.notebookPath;
    this._poll = new Poll<DevicesReply | null, Error>({
      name: 'jupyter-gpumem:devices',
      factory: () => this._tick(),
      frequency: pollFrequency(options.pollSeconds),
      standby: options.standby
    });
    // Poll drops the answer of a request overtaken by refresh(): read answers from its ticks.
    this._poll.ticked.connect((_, state) => {
      if (state.phase === 'resolved' || state.phase === 'reconnected') {
        if (state.payload) {
          this._take(state.payload as DevicesReply);
        }
      } else if (state.phase === 'rejected') {
        this._error = asError(state.payload);
        this._changed.emit();
      } else if (state.phase === 'standby') {
        // Nobody sees the readings. An open socket would keep the server's NVML reader going
        // and be sent every change; closed, the server's reader goes idle after its
        // idle_intervals, and coming back on screen costs one handshake and one answer, as one
        // poll does.
        this._closeSocket();
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

  /** Add to the page's clock to read the server's: the latest reply's `t` at its arrival. */
  get serverOffsetMs(): number {
    return this._serverOffsetMs;
  }

  /** The latest failure, or null once a request succeeds again. */
  get error(): Error | null {
    return this._error;
  }

  /** How readings arrive now: pushed on the socket, or by polling `/devices`. */
  get feed(): DevicesFeed {
    return this._feed;
  }

  /** Polling: how often to ask. On the socket: how soon a closed socket is opened again. */
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
    this._closeSocket();
    this._poll.dispose();
    Signal.clearData(this);
  }

  private _take(reply: DevicesReply): void {
    this._reply = reply;
    this._serverOffsetMs = serverOffsetMs(reply.t, Date.now());
    this._error = null;
    this._changed.emit();
  }

  private _tick(): Promise<DevicesReply | null> {
    const path = this._notebookPath();
    if (this._feed === 'polling') {
      return fetchDevices(path);
    }
    if (this._socket && this._socket.notebookPath === path) {
      return Promise.resolve(null); // open, or opening: its answers come as pushed
    }
    this._closeSocket(); // another notebook's
    return this._openSocket(path);
  }

  /**
   * Opens a socket for `path`. Resolves once it answers, or, when it closes unanswered, with
   * GET `/devices`' answer after switching to polling; rejects when that fails too.
   */
  private _openSocket(path: string | null): Promise<DevicesReply | null> {
    return new Promise((resolve, reject) => {
      const socket = new DevicesSocket(path, SOCKET_ANSWER_TIMEOUT_MS, {
        onAnswer: reply => {
          if (this._socket === socket) {
            this._take(reply);
          }
          resolve(null);
        },
        onClose: answered => {
          if (this._socket === socket) {
            this._socket = null; // the next tick opens another
          }
          if (answered) {
            return;
          }
          fetchDevices(path).then(
            reply => {
              this._feed = feedAfterClose(false, true);
              resolve(reply);
            },
            error => reject(error)
          );
        }
      });
      this._socket = socket;
    });
  }

  private _closeSocket(): void {
    this._socket?.close();
    this._socket = null;
  }
}
