/** The server extension's REST API, as the panel calls it. */

import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import { API_PREFIX } from './constants';
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

/** GET devices, with this notebook's kernel attributed when a path is given. */
export function fetchDevices(notebookPath: string | null): Promise<DevicesReply> {
  const query = notebookPath ? `?notebook=${encodeURIComponent(notebookPath)}` : '';
  return getJson<DevicesReply>(`devices${query}`);
}
