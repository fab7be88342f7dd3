"""Test and demo support that ships with the package: a fake NVML world (see docs/fake-gpu.md)."""

from __future__ import annotations

from .fake_nvml import DROPIN_DIR, ENV_VAR, SCENARIOS, FakeGpu, FakeProcess, FakeWorld, fake_nvml, scenario

__all__ = ["DROPIN_DIR", "ENV_VAR", "SCENARIOS", "FakeGpu", "FakeProcess", "FakeWorld", "fake_nvml", "scenario"]
