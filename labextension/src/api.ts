/** The server extension's REST API and its push socket, as the panel calls them. */

import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import { API_PREFIX } from './constants';
import { devicesSocketUrl } from './devicesFeed';
import { DevicesReply } from './types';

/** Why a request failed: no server, no extension on it, or an error answer. */
export type ApiFailure =
  | { kind: 'unreachable'; detail: string }
  | { kind: 'not-enabled' }
  | { kind: 'error-answer'; status: number; detail: string };

/** Raised when the server extension cannot be reached or answers with an error. */
export class ApiError extends Error {
  constructor(readonly failure: ApiFailure) {
    // For the console; the panel words the failure itself (DevicesSection).
    super(`jupyter-gpumem API: ${JSON.stringify(failure)}`);
  }
}

async function getJson<T>(endpoint: string): Promise<T> {
  const settings = ServerConnection.makeSettings();
  const url = URLExt.join(settings.baseUrl, API_PREFIX, endpoint);
  let response: Response;
  try {
    // 'no-cache' revalidates without the timestamp query that 'no-store' appends.
    response = await ServerConnection.makeRequest(url, { cache: 'no-cache' }, settings);
  } catch (error) {
    throw new ApiError({ kind: 'unreachable', detail: String(error) });
  }
  let body: any = null;
  try {
    body = await response.json();
  } catch {
    body = null;
  }
  if (!response.ok) {
    throw new ApiError(
      response.status === 404
        ? { kind: 'not-enabled' }
        : {
            kind: 'error-answer',
            status: response.status,
            detail: body && body.error ? String(body.error) : response.statusText
          }
    );
  }
  return body as T;
}

/** The server's answer to "keep running". */
export interface KeepAnswer {
  kernel_id: string;
  /** The earliest the kernel may now be shut down (POSIX seconds, the server's clock). */
  cull_at: number;
  message: string;
}

/** POST keep: the server's culler counts the kernel's idle time from now. */
export async function keepKernel(kernelId: string): Promise<KeepAnswer> {
  const settings = ServerConnection.makeSettings();
  const url = URLExt.join(
    settings.baseUrl,
    API_PREFIX,
    `keep?kernel=${encodeURIComponent(kernelId)}`
  );
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, { method: 'POST' }, settings);
  } catch (error) {
    throw new ApiError({ kind: 'unreachable', detail: String(error) });
  }
  const body = await response.json().catch(() => null);
  if (!response.ok) {
    // Every answer of this route is its own, a 404 included ("no kernel … on this server").
    throw new Error(body && body.error ? String(body.error) : response.statusText);
  }
  return body as KeepAnswer;
}

/** GET devices, with this notebook's kernel attributed when a path is given. */
export function fetchDevices(notebookPath: string | null): Promise<DevicesReply> {
  const query = notebookPath ? `?notebook=${encodeURIComponent(notebookPath)}` : '';
  return getJson<DevicesReply>(`devices${query}`);
}

export interface DevicesSocketHandlers {
  /** Each answer the server pushes: the same JSON as GET devices. */
  onAnswer: (reply: DevicesReply) => void;
  /** Once, when the socket ends by itself (not by `close()`); `answered` if any answer came. */
  onClose: (answered: boolean) => void;
}

/**
 * The push socket `/devices/ws`, opened with JupyterLab's connection settings (its `WebSocket`,
 * `wsUrl` and token) as JupyterLab opens its own. A socket that gives no answer within
 * `answerTimeoutMs` (a proxy holding the upgrade) is ended as if it had closed.
 */
export class DevicesSocket {
  private _ws: WebSocket;
  private _answered = false;
  private _ended = false;
  private _timer: ReturnType<typeof setTimeout>;

  constructor(
    readonly notebookPath: string | null,
    answerTimeoutMs: number,
    private _handlers: DevicesSocketHandlers
  ) {
    const settings = ServerConnection.makeSettings();
    this._ws = new settings.WebSocket(devicesSocketUrl(settings, notebookPath));
    this._ws.onmessage = event => {
      let reply: DevicesReply;
      try {
        reply = JSON.parse(String(event.data));
      } catch {
        return; // not an answer; the server sends only answers
      }
      this._answered = true;
      clearTimeout(this._timer);
      this._handlers.onAnswer(reply);
    };
    this._ws.onclose = () => this._end();
    this._timer = setTimeout(() => {
      if (!this._answered) {
        this._end();
      }
    }, answerTimeoutMs);
  }

  /** Closes the socket; no handler is called after this. */
  close(): void {
    this._ended = true;
    this._detach();
  }

  private _end(): void {
    if (this._ended) {
      return;
    }
    this._ended = true;
    this._detach();
    this._handlers.onClose(this._answered);
  }

  private _detach(): void {
    clearTimeout(this._timer);
    const ws = this._ws;
    ws.onmessage = null;
    ws.onclose = null;
    if (ws.readyState === ws.CONNECTING || ws.readyState === ws.OPEN) {
      ws.close();
    }
  }
}
