import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import { API_PREFIX } from './constants';
import { DevicesReply } from './types';

/** Raised when the server extension cannot be reached or answers with an error. */
export class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number | null
  ) {
    super(message);
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
    throw new ApiError(`The Jupyter server cannot be reached (${error}).`, null);
  }
  let body: any = null;
  try {
    body = await response.json();
  } catch {
    body = null;
  }
  if (!response.ok) {
    const detail = body && body.error ? body.error : response.statusText;
    throw new ApiError(
      response.status === 404
        ? 'The jupyter-gpumem server extension is not enabled on this server.'
        : `The server answered ${response.status}: ${detail}`,
      response.status
    );
  }
  return body as T;
}

/** GET devices, with this notebook's kernel attributed when a path is given. */
export function fetchDevices(notebookPath: string | null): Promise<DevicesReply> {
  const query = notebookPath
    ? `?notebook=${encodeURIComponent(notebookPath)}`
    : '';
  return getJson<DevicesReply>(`devices${query}`);
}
