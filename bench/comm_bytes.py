"""How many bytes reach the front end over the widget comms while a block runs (for benches)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator


@contextlib.contextmanager
def measure_comm_bytes() -> Iterator[list[int]]:
    """Widgets made inside record the size of every comm message they send (JSON + buffers).

    Yields a list that fills with one byte count per message. For benchmarks and tests; a
    kernel's real comms are not touched.
    """
    import comm as comm_module
    from comm import DummyComm

    sizes: list[int] = []

    class _MeterComm(DummyComm):
        def publish_msg(self, msg_type, data=None, metadata=None, buffers=None, **keys):
            body = json.dumps(data, default=str, separators=(",", ":"))
            sizes.append(len(body.encode()) + sum(len(memoryview(b).cast("B")) for b in buffers or ()))

    original = comm_module.create_comm
    comm_module.create_comm = lambda *a, **k: _MeterComm(*a, **k)
    try:
        yield sizes
    finally:
        comm_module.create_comm = original
