"""docs/fake-gpu.md's JSON world format, checked against the loader: its example loads and
reads as written, and its tables name every field FakeWorld writes."""

from __future__ import annotations

import json
import re
from pathlib import Path

from jupyter_gpumem.core.readings import DeviceReading, ProcessReading
from jupyter_gpumem.sources.nvml import NvmlSource
from jupyter_gpumem.testing import FakeGpu, FakeWorld, fake_nvml, scenario

DOC = Path(__file__).resolve().parents[2] / "docs" / "fake-gpu.md"
GiB = 1024**3


def format_section() -> str:
    text = DOC.read_text(encoding="utf-8")
    return text.split("## The JSON world format", 1)[1].split("\n## ", 1)[0]


def documented_example() -> dict:
    block = re.search(r"```json\n(.*?)```", format_section(), re.S)
    assert block, "docs/fake-gpu.md's JSON world format section has no json example"
    return json.loads(block.group(1))


def documented_fields() -> set[str]:
    """Every `name` in the first column of the section's tables."""
    rows = [line for line in format_section().splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`(\w+)`", row.split("|")[1])}


def test_the_documented_example_reads_as_one_gpu_with_one_process(tmp_path):
    path = tmp_path / "world.json"
    path.write_text(json.dumps(documented_example()))
    world = FakeWorld.load(path)
    assert world.name == "one_busy_gpu"
    with fake_nvml(str(path)):
        (reading,) = NvmlSource().read()
    assert isinstance(reading, DeviceReading)
    assert (reading.name, reading.used_bytes, reading.total_bytes, reading.utilization_percent) == (
        "NVIDIA H100 80GB HBM3",
        10 * GiB,
        81_559 * 1024**2,
        40,
    )
    assert reading.processes == (ProcessReading(4_200_001, 10 * GiB),)


def test_the_documented_tables_name_every_field_a_world_writes():
    written = set(scenario("dgx_h100").to_json()) | set(FakeGpu.__dataclass_fields__)
    assert written - documented_fields() == set()


def test_a_saved_world_says_it_is_synthetic(tmp_path):
    scenario("dgx_h100").save(tmp_path / "w.json")
    assert json.loads((tmp_path / "w.json").read_text())["synthetic"] is True
