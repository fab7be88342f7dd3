"""Which readings are made up. A trace header's ``synthetic`` says whether any of its readings
are; its optional ``synthetic_fields`` says which sample fields (docs/trace-format.md). The fake
NVML world makes up NVML's readings only: JAX's live CPU arrays read beside it are real, and a
view drawn from them alone is not marked synthetic.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The fields of a sample line that hold readings.
SAMPLE_FIELDS = ("devices", "jax", "pids_not_here", "torch", "cpu_arrays")
# What the fake NVML world makes up: NVML's devices, and so which of their pids are not here.
NVML_FIELDS = ("devices", "pids_not_here")


def synthetic_fields_problem(header: Mapping[str, Any]) -> str | None:
    """Why a header's ``synthetic_fields`` cannot be read, or None where it is absent or sound:
    a list of sample fields, not empty exactly when ``synthetic`` is true."""
    if "synthetic_fields" not in header:
        return None
    fields = header["synthetic_fields"]
    if not isinstance(fields, list) or not all(isinstance(f, str) and f in SAMPLE_FIELDS for f in fields):
        return (
            f"header.synthetic_fields must be a list of sample fields ({', '.join(SAMPLE_FIELDS)}), got {fields!r:.80}"
        )
    if bool(fields) != (header.get("synthetic") is True):
        return "header.synthetic_fields lists the made-up fields: some when synthetic is true, none when false"
    return None


def made_up_fields(header: Mapping[str, Any] | None) -> frozenset[str]:
    """The sample fields a trace header says are made up: none unless ``synthetic`` is true;
    then those ``synthetic_fields`` lists, or every field where it lists none (test data, demos)."""
    if not header or header.get("synthetic") is not True:
        return frozenset()
    if "synthetic_fields" in header and synthetic_fields_problem(header) is None:
        return frozenset(header["synthetic_fields"])
    return frozenset(SAMPLE_FIELDS)


def header_fields(made_up: tuple[str, ...]) -> dict[str, Any]:
    """The header fields that say which readings a writer made up (none: a real recording)."""
    if not made_up:
        return {"synthetic": False}
    return {"synthetic": True, "synthetic_fields": [f for f in SAMPLE_FIELDS if f in made_up]}
