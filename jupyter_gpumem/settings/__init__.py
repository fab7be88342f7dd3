"""What JAX will make of the allocator settings: the pure readers behind ``allocator_shim``.

- ``effective``: each setting's value in effect and its source, and the status warnings
- ``cuda_async_limits``: what the fraction and async-prealloc really do under cuda_async
- ``client_create_options``: ``jax_pjrt_client_create_options``, parsed as JAX parses it

``allocator_shim.py`` is the face that validates, applies, refuses and resets; JAX's variable
names live in ``env_table.py``.
"""
