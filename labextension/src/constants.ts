/** Names shared by the panel, the server extension and the kernel side; the panel's defaults. */

export const PLUGIN_ID = 'jupyter-gpumem:plugin';
export const PANEL_ID = 'jupyter-gpumem-panel';
export const API_PREFIX = 'jupyter-gpumem/api';
export const COMM_TARGET = 'jupyter_gpumem';
export const METADATA_KEY = 'jupyter_gpumem';
/** The translation domain of the panel's strings. */
export const TRANSLATION_DOMAIN = 'jupyter_gpumem';

export const COMMAND_OPEN = 'jupyter-gpumem:open';
export const COMMAND_RESTART_WITH_SETTINGS = 'jupyter-gpumem:restart-with-settings';

export const DEFAULT_POLL_SECONDS = 2;
export const MIN_POLL_SECONDS = 0.5;
/** After failures a poll waits longer each time, up to this. */
export const MAX_BACKOFF_SECONDS = 30;

/**
 * How long the push socket may take to give its first answer before it counts as not opened.
 * Above the server's 10 s wait for its very first NVML read (docs/server.md).
 */
export const SOCKET_ANSWER_TIMEOUT_MS = 15000;

/** How long an idle kernel (no cell running) may take to answer a snapshot request. */
export const SNAPSHOT_TIMEOUT_MS = 3000;

export const LOAD_EXTENSION_CODE = '%load_ext jupyter_gpumem';

/** After a snapshot request goes unanswered, the panel asks again after these waits, then every last one. */
export const SNAPSHOT_RETRY_MS = [2000, 5000, 10000, 30000];

/** How long to wait before asking again after `failures` unanswered requests in a row (1 or more). */
export function snapshotRetryDelayMs(failures: number): number {
  const i = Math.min(Math.max(failures, 1), SNAPSHOT_RETRY_MS.length) - 1;
  return SNAPSHOT_RETRY_MS[i];
}

/**
 * From this many GPUs the panel lists them all in one compact row each above the cards (docs/guide.md);
 * with fewer, every card already fits on screen.
 */
export const OVERVIEW_FROM_GPUS = 4;
/** A GPU at least this full is marked as nearly full in the compact list. */
export const NEARLY_FULL_FRACTION = 0.9;
