/** Names shared by the panel, the server extension and the kernel side. */

export const PLUGIN_ID = 'jupyter-gpumem:plugin';
export const PANEL_ID = 'jupyter-gpumem-panel';
export const API_PREFIX = 'jupyter-gpumem/api';
export const COMM_TARGET = 'jupyter_gpumem';
export const METADATA_KEY = 'jupyter_gpumem';

export const COMMAND_OPEN = 'jupyter-gpumem:open';
export const COMMAND_RESTART_WITH_SETTINGS = 'jupyter-gpumem:restart-with-settings';

export const DEFAULT_POLL_SECONDS = 2;
export const MIN_POLL_SECONDS = 0.5;

/** Allocator names JAX reads from XLA_PYTHON_CLIENT_ALLOCATOR (newer JAX accepts more). */
export const ALLOCATOR_CHOICES = ['default', 'platform', 'bfc', 'cuda_async'];

export const LOAD_EXTENSION_CODE = '%load_ext jupyter_gpumem';
