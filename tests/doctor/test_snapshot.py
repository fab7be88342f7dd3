"""``%gpumem snapshot PATH``: a real device memory profile from CPU JAX, read back as pprof.

``jax.profiler.device_memory_profile`` (jax/_src/profiler.py, 0.10.2) returns a gzipped
``perftools.profiles.Profile`` (google/pprof, proto/profile.proto): field 1 ``sample_type``
(ValueType: type=1, unit=2, string indices), 2 ``sample`` (location_id=1 packed, value=2 packed,
label=3), 4 ``location`` (id=1, line=4: function_id=1, line=2), 5 ``function`` (id=1, name=2,
filename=4), 6 ``string_table``. No protobuf package is installed here, so the test reads the
wire format itself (varints and length-delimited fields are all it needs).
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from child_env import pythonpath

from jupyter_gpumem.doctor.snapshot import check_path

pytestmark = pytest.mark.jax_versions

SESSION = Path(__file__).parents[1] / "kernel_session.py"

CELLS = [
    "%gpumem snapshot before.prof",
    "import jax.numpy as jnp\ndef leak():\n    return jnp.ones((1000,))\nkept = leak()",
    "%gpumem snapshot memory.prof",
    "%gpumem snapshot no_such_folder/memory.prof",
    "%gpumem snapshot .",
    "%gpumem snapshot",
    "import jax\nprint(jax.devices()[0])",  # the name the profile labels the device with
]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, list[dict]]:
    tmp_path = tmp_path_factory.mktemp("snapshot")
    (tmp_path / "cells.json").write_text(json.dumps(CELLS))
    proc = subprocess.run(
        [sys.executable, str(SESSION), "cells.json", "--ext"],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
        env={"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": pythonpath()},
    )
    line = next((l for l in proc.stdout.splitlines() if l.startswith("JSON")), None)
    assert line is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    return tmp_path, json.loads(line[4:])


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i


def _fields(data: bytes) -> list[tuple[int, object]]:
    """(field number, int or bytes) for each field of one message."""
    out, i = [], 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
        elif wire == 2:
            size, i = _varint(data, i)
            value, i = data[i : i + size], i + size
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            value, i = data[i : i + size], i + size
        else:
            raise AssertionError(f"wire type {wire} is not in pprof's proto")
        out.append((number, value))
    return out


def _packed(value: object) -> list[int]:
    if isinstance(value, int):
        return [value]
    numbers, i = [], 0
    while i < len(value):
        n, i = _varint(value, i)
        numbers.append(n)
    return numbers


def read_pprof(raw: bytes) -> dict:
    """Sample types, and each sample as its values, its string labels (XLA's heap profile labels
    ``kind`` buffer or executable, and ``device``) and the functions on its stack."""
    profile = _fields(gzip.decompress(raw))
    strings = [v.decode() for n, v in profile if n == 6]
    functions = {}
    for n, v in profile:
        if n == 5:
            f = dict(_fields(v))
            functions[f[1]] = (strings[f.get(2, 0)], strings[f.get(4, 0)])
    locations = {}
    for n, v in profile:
        if n == 4:
            fields = _fields(v)
            ident = dict(fields)[1]
            locations[ident] = [functions[dict(_fields(line))[1]] for k, line in fields if k == 4]
    types = [
        tuple(strings[x] for x in (dict(_fields(v)).get(1, 0), dict(_fields(v)).get(2, 0)))
        for n, v in profile
        if n == 1
    ]
    samples = []
    for n, v in profile:
        if n == 2:
            fields = _fields(v)
            loc_ids = [x for k, val in fields if k == 1 for x in _packed(val)]
            values = [x for k, val in fields if k == 2 for x in _packed(val)]
            stack = [fn for loc in loc_ids for fn in locations[loc]]
            labels = {
                strings[dict(_fields(val))[1]]: strings[dict(_fields(val)).get(2, 0)] for k, val in fields if k == 3
            }
            samples.append({"values": values, "stack": stack, "labels": labels})
    return {"types": types, "samples": samples}


def test_the_snapshot_is_a_gzipped_pprof_with_the_array_and_its_stack(run):
    tmp_path, cells = run
    assert cells[2]["ok"], cells[2]
    raw = (tmp_path / "memory.prof").read_bytes()
    assert raw[:2] == b"\x1f\x8b"
    profile = read_pprof(raw)
    assert profile["types"] == [("allocations", "count"), ("space", "bytes")]
    buffers = [s for s in profile["samples"] if s["labels"].get("kind") == "buffer"]
    leaked = [s for s in buffers if any(fn == "leak" for fn, _ in s["stack"])]
    # str(device): "TFRT_CPU_0" up to jax 0.7.2 at least, "cpu:0" in 0.10.2 (read on their CPU wheels)
    device = cells[6]["out"].strip()
    assert [(s["values"], s["labels"]["device"]) for s in leaked] == [([1, 4000], device)]
    assert any(file.startswith("<ipython-input-2-") for _, file in leaked[0]["stack"])


def test_the_snapshot_says_how_to_open_it(run):
    tmp_path, cells = run
    size = (tmp_path / "memory.prof").stat().st_size
    assert cells[2]["out"].splitlines()[0].startswith("Wrote JAX's device memory profile (")
    assert f"pprof -http=localhost:8080 {tmp_path / 'memory.prof'}" in cells[2]["out"]
    assert size > 100


def test_before_jax_starts_the_snapshot_is_refused_and_nothing_written(run):
    tmp_path, cells = run
    assert cells[0]["error"] == "UsageError"
    assert "JAX's backend has not started" in cells[0]["out"] and "nothing was written" in cells[0]["out"]
    assert not (tmp_path / "before.prof").exists()


@pytest.mark.parametrize(
    "index, says", [(3, "does not exist; nothing was written"), (4, "is a folder"), (5, "PATH is required")]
)
def test_a_bad_path_is_a_usage_error_and_writes_nothing(run, index, says):
    tmp_path, cells = run
    assert cells[index]["error"] == "UsageError" and says in cells[index]["out"], cells[index]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != ".ipython") == ["cells.json", "memory.prof"]


def test_a_path_under_a_file_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("kept")
    with pytest.raises(ValueError, match="does not exist"):
        check_path(str(tmp_path / "notes.txt" / "memory.prof"))
    assert (tmp_path / "notes.txt").read_text() == "kept"


def test_a_link_planted_at_the_path_is_refused_and_its_target_kept(tmp_path):
    (tmp_path / "private").write_text("kept")
    os.symlink(tmp_path / "private", tmp_path / "memory.prof")
    with pytest.raises(ValueError, match="is a symbolic link .*nothing was written"):
        check_path(str(tmp_path / "memory.prof"))
    assert (tmp_path / "private").read_text() == "kept"
