/**
 * How the panel gets the server's device readings: pushed on `/devices/ws`, or, where no socket
 * can be opened, asked of `/devices` at each poll tick. The socket's URL and the choice between
 * the two. Pure: no JupyterLab imports.
 */

import { API_PREFIX } from './constants';

/** `socket`: the server pushes each changed reading; `polling`: GET `/devices` each tick. */
export type DevicesFeed = 'socket' | 'polling';

/** What a websocket URL needs from JupyterLab's `ServerConnection.ISettings`. */
export interface SocketSettings {
  wsUrl: string;
  token: string;
  /** Whether the token goes in the URL; otherwise the browser's login cookie authenticates. */
  appendToken: boolean;
}

/**
 * The push socket's URL, built as JupyterLab builds its own websockets' (@jupyterlab/services
 * 7.6, `kernel/default.js` and `event/index.js`): under `wsUrl`, with `?token=` only when
 * `appendToken` says so.
 */
export function devicesSocketUrl(settings: SocketSettings, notebookPath: string | null): string {
  const base = settings.wsUrl.endsWith('/') ? settings.wsUrl : `${settings.wsUrl}/`;
  const query: string[] = [];
  if (notebookPath) {
    query.push(`notebook=${encodeURIComponent(notebookPath)}`);
  }
  if (settings.appendToken && settings.token !== '') {
    query.push(`token=${encodeURIComponent(settings.token)}`);
  }
  return `${base}${API_PREFIX}/devices/ws${query.length ? `?${query.join('&')}` : ''}`;
}

/**
 * The feed to use after a socket closed.
 *
 * The server answers as soon as a socket opens, so a socket that closed before its first answer
 * could not be opened. If `/devices` answered right after (`devicesAnswered`), the socket is what
 * fails: a proxy that blocks websockets, or an older server without the route (a 404 upgrade).
 * The panel then polls, which works there. If `/devices` failed too, the server is out of reach,
 * and the socket is tried again, backing off, as after a socket that answered and then closed
 * (the server restarted, the network dropped).
 */
export function feedAfterClose(answered: boolean, devicesAnswered: boolean): DevicesFeed {
  return !answered && devicesAnswered ? 'polling' : 'socket';
}
