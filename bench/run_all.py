"""Run every bench/bench_*.py, each in a fresh interpreter, and print one table.

    .venv/bin/python bench/run_all.py [NAME_SUBSTRING ...]

Each bench module exposes ``run() -> list[dict(name, value, unit, note)]``. A bench that fails
shows up as a row saying so; the others still run.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
_MARK = "@@bench-rows@@"
_RUNNER = (
    "import json, runpy, sys; sys.path.insert(0, {here!r});"
    "rows = runpy.run_path({path!r}, run_name='bench')['run']();"
    "print({mark!r} + json.dumps(rows, default=str))"
)


def discover(filters: list[str] | None = None) -> list[pathlib.Path]:
    paths = sorted(HERE.glob("bench_*.py"))
    if filters:
        paths = [p for p in paths if any(f in p.stem for f in filters)]
    return paths


def run_one(path: pathlib.Path, timeout: float = 900) -> list[dict]:
    code = _RUNNER.format(here=str(HERE), path=str(path), mark=_MARK)
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return [{"name": path.stem, "value": None, "unit": "", "note": f"timed out after {timeout:.0f} s"}]
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(_MARK):
            return json.loads(line[len(_MARK) :])
    last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return [{"name": path.stem, "value": None, "unit": "", "note": f"failed: {last}"}]


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def table(rows: list[tuple[str, dict]]) -> str:
    lines = [("bench", "measure", "value", "unit", "note")]
    lines += [(b, r.get("name", ""), _fmt(r.get("value")), r.get("unit", ""), r.get("note", "")) for b, r in rows]
    widths = [max(len(str(line[i])) for line in lines) for i in range(4)]
    out = []
    for k, line in enumerate(lines):
        out.append("  ".join(str(c).ljust(w) for c, w in zip(line[:4], widths)) + "  " + line[4])
        if k == 0:
            out.append("  ".join("-" * w for w in widths) + "  " + "-" * 4)
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    rows = []
    for path in discover(argv if argv is not None else sys.argv[1:]):
        print(f"running {path.name} ...", file=sys.stderr, flush=True)
        rows += [(path.stem.removeprefix("bench_"), row) for row in run_one(path)]
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
