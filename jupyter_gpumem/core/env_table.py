"""Which environment variables and options JAX reads for its allocator: the one table.

The settings code, ``%gpumem status``, the panel (through the kernel's snapshot) and the docs
all read names from here. Pure: importing it imports nothing else.
"""

from __future__ import annotations

PREALLOCATE_VAR = "XLA_PYTHON_CLIENT_PREALLOCATE"


FRACTION_VAR = "XLA_CLIENT_MEM_FRACTION"  # read by jaxlib since 0.4.3x; the one we write if read


OLD_FRACTION_VAR = "XLA_PYTHON_CLIENT_MEM_FRACTION"


ALLOCATOR_VAR = "XLA_PYTHON_CLIENT_ALLOCATOR"


ASYNC_PREALLOC_VAR = "TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC"


UNIFIED_MEMORY_VAR = "TF_FORCE_UNIFIED_MEMORY"  # read by XLA's BFC allocator at the start


STALE_ALLOCATOR_VAR = "TF_GPU_ALLOCATOR"  # TensorFlow's; JAX does not read it


REMAT_OPTION = "jax_compiler_enable_remat_pass"


REMAT_ENV = "JAX_COMPILER_ENABLE_REMAT_PASS"  # read by jax at import only


# A jax.config option whose entries JAX merges over the CUDA plugin's options, so over the
# variables above (jax/_src/xla_bridge.py, make_pjrt_c_api_client, JAX 0.10 and 0.11).
CREATE_OPTIONS_OPTION = "jax_pjrt_client_create_options"


CREATE_OPTIONS_ENV = "JAX_PJRT_CLIENT_CREATE_OPTIONS"  # its value when jax is imported


# The create options' names for the settings they can override.
CREATE_OPTION_KEYS = {"preallocate": "preallocate", "fraction": "memory_fraction", "allocator": "allocator"}


SETTING_NAMES = ("preallocate", "fraction", "allocator", "async_prealloc", "remat")


ENV_SETTINGS = ("preallocate", "fraction", "allocator", "async_prealloc")


JAX_DEFAULT = "JAX default"


FROM_ENVIRONMENT = "environment"


FROM_MAGIC = "%gpumem"


# Set by the JupyterLab panel from the notebook's metadata at kernel start (no magic typed).
FROM_NOTEBOOK = "notebook settings"


FROM_CONFIG = "jax.config"


# A setting read from a trace's header (settings.env): the environment the recorded process had.
FROM_RECORDING = "recorded"


# JAX's documented default when XLA_CLIENT_MEM_FRACTION is unset (of total memory).
DEFAULT_FRACTION = 0.75


# Allocator names to probe the installed JAX with; the accepted set is whatever it takes.
ALLOCATOR_CANDIDATES = ("default", "bfc", "platform", "cuda_async", "vmm", "address")


ALLOCATOR_ALIASES = {
    "cuda_malloc_async": (
        "cuda_async",
        "cuda_malloc_async is TensorFlow's name: JAX calls it cuda_async and no longer reads "
        "TF_GPU_ALLOCATOR, so XLA_PYTHON_CLIENT_ALLOCATOR=cuda_async is what gets written",
    ),
}


# The variables JAX reads once, when its backend starts: the CUDA plugin's options (through
# generate_pjrt_gpu_plugin_options), XLA's cuda_async preallocation and unified memory, and
# XLA_FLAGS (parsed when the first backend is created). What they say later is not in effect.
READ_AT_START_VARS = (
    PREALLOCATE_VAR,
    FRACTION_VAR,
    OLD_FRACTION_VAR,
    ALLOCATOR_VAR,
    ASYNC_PREALLOC_VAR,
    "XLA_FLAGS",
    UNIFIED_MEMORY_VAR,
)
