"""JAX's allocator settings: written, read back as JAX will read them, published, and shown.

- ``apply``: validate, apply, refuse and reset the settings (it writes JAX's variables);
  ``allocator_shim.py`` is its face; ``configure``: ``configure()``, apply then publish
- ``effective``: each setting's value in effect and its source, and the status warnings
- ``cuda_async_limits``: what the fraction and async-prealloc really do under cuda_async
- ``client_create_options``: ``jax_pjrt_client_create_options``, parsed as JAX parses it
- ``publish``: the kernel's settings in a file beside its connection file; ``published``: that
  file's name and shape, which the server reads
- ``tensorflow``: ``%gpumem tensorflow``; ``cpu_fallback``: JAX on the CPU beside GPUs;
  ``status``: ``%gpumem status``; ``started_by``: who started JAX, as a sentence

JAX's variable names live in ``core/env_table.py``.
"""
