"""Where was an array allocated, or JAX started: the first frame of a stack outside JAX, the
standard library and installed packages, as ``cell [n] line L in fn`` or ``file.py:L in fn``.

Reads ``Array.traceback`` (jaxlib's ``Traceback``: ``.frames``, innermost first, each with
``file_name``, ``line_num`` and ``function_name``; hashable, and equal for equal stacks), which
jaxlib records when it makes an array; no buffer is read. A site is worked out once per distinct
traceback and kept, so ten thousand arrays made by one line cost one reduction.

Which cell made an array, and which execution of it, come from the same traceback
(``allocation_labeller``): ``raw_frames()`` gives each frame's code object (jaxlib/traceback.cc,
jax-v0.7.2 and jax-v0.11.0; jaxlib 0.4.38, built from openxla/xla, has the same method, checked
on its CPU wheel), and tracebacks are recorded by default (``traceback_enabled_ = true``). Lines
that keep arrays from two or more executions of a cell are ``growing``.
"""

from __future__ import annotations

import linecache
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from jupyter_gpumem.core.units import format_bytes

# A frame as (file, line, function).
FrameTuple = tuple[str, int, str]

_LIBRARY_DIRS = ("site-packages", "dist-packages")
_JAX_PACKAGES = ("jax", "jaxlib")
_OWN_DIR = os.path.dirname(os.path.abspath(__file__))
_stdlib_dirs: list[tuple[str, ...]] = []  # read on first use: loading the extension stays cheap


def _stdlib() -> tuple[str, ...]:
    if not _stdlib_dirs:
        import sysconfig

        paths = sysconfig.get_paths()
        _stdlib_dirs.append(
            tuple({os.path.abspath(p) + os.sep for p in (paths.get("stdlib"), paths.get("platstdlib")) if p})
        )
    return _stdlib_dirs[0]


# IPython before ipykernel names a cell's code object "<ipython-input-N-hash>" (compilerop.py).
_INPUT_NAME = re.compile(r"^<ipython-input-(\d+)-[0-9a-f]+>$")


@dataclass(frozen=True)
class Site:
    """One frame, as a person reads it: ``cell`` is the execution count where the file is a
    notebook cell; ``library`` is True for code in an installed package."""

    file: str
    line: int
    function: str
    cell: int | None = None
    library: bool = False

    def __str__(self) -> str:
        fn = "" if self.function == "<module>" else f" in {self.function.replace('.<locals>', '')}"
        if self.cell is not None:
            return f"cell [{self.cell}] line {self.line}{fn}"
        return f"{_short_path(self.file)}:{self.line}{fn}"


def _short_path(path: str) -> str:
    """A library's file from its package down (``flax/linen/module.py``); any other file by its
    name, with its folder where the name alone says little (``eagerpkg/__init__.py``)."""
    parts = path.replace("\\", "/").split("/")
    for i, part in enumerate(parts[:-1]):
        if part in _LIBRARY_DIRS:
            return "/".join(parts[i + 1 :])
    if parts[-1] == "__init__.py" and len(parts) > 1:
        return "/".join(parts[-2:])
    return parts[-1]


def _package_after_library_dir(path: str) -> str | None:
    parts = path.replace("\\", "/").split("/")
    for i, part in enumerate(parts[:-1]):
        if part in _LIBRARY_DIRS:
            return parts[i + 1]
    return None


def kind_of(path: str) -> str:
    """``"internal"`` (JAX, jaxlib or a JAX plugin, the standard library, this package, or a
    frozen module), ``"library"`` (another installed package) or ``"user"``."""
    if path.startswith("<") and not _INPUT_NAME.match(path):
        return "internal" if path.startswith("<frozen") else "user"
    package = _package_after_library_dir(path)
    if package is not None:
        top = package.split(".", 1)[0]
        return "internal" if top in _JAX_PACKAGES or top.startswith("jax_") else "library"
    if path.startswith(_OWN_DIR + os.sep) or path.startswith(_stdlib()):
        return "internal"
    return "user"


def cell_numbers(shell: Any) -> Mapping[str, int]:
    """The shell's map of cell file names to execution counts (IPython's CachingCompiler keeps
    it as ``_filename_map``, for ipykernel's hashed file names too); empty without one. The
    number is the cell's own on every IPython: ``run_cell_async`` passes the running cell's
    count to ``compiler.cache`` (``self.execution_count`` before the count goes up in 8.39.0
    line 3303 and 9.7.0 line 3361; the saved ``execution_count`` in 9.8.0 line 3367)."""
    compiler = getattr(shell, "compile", None)
    found = getattr(compiler, "_filename_map", None)
    return found if isinstance(found, Mapping) else {}


def counts_cells_first(ipython_version: tuple[int, ...]) -> bool:
    """Whether this IPython adds one to ``shell.execution_count`` before the cell runs.

    ``InteractiveShell.run_cell_async`` (IPython/core/interactiveshell.py) adds it after the cell
    in 8.x and 9.0 to 9.7 (``self.execution_count += 1`` at the end: 8.39.0 line 3352, 9.7.0 line
    3417), and before ``pre_run_cell`` from 9.8.0 (``execution_count = result.execution_count =
    self.execution_count`` then ``self.execution_count += 1``, 9.8.0 lines 3296-3299).
    """
    return tuple(ipython_version[:2]) >= (9, 8)


def _ipython_version() -> tuple[int, ...]:
    ipython = sys.modules.get("IPython")  # a shell exists, so IPython is imported
    try:
        return tuple(int(part) for part in ipython.version_info[:2])  # type: ignore[union-attr]
    except (AttributeError, TypeError, ValueError):
        return (9, 8)  # not IPython's own versioning: take today's order


def running_cell_number(shell: Any, stored: bool = True) -> int | None:
    """The number of the cell running now (from ``pre_run_cell`` or from code the cell runs),
    on every IPython: ``execution_count`` less one where IPython counts the cell first
    (``counts_cells_first``). None for a cell kept out of the history (``store_history`` false:
    IPython gives it no number) or a shell without a count."""
    count = getattr(shell, "execution_count", None)
    if not stored or not isinstance(count, int) or isinstance(count, bool):
        return None
    return count - 1 if counts_cells_first(_ipython_version()) else count


def finished_cell_number(result: Any) -> int | None:
    """The number of the cell an ``ExecutionResult`` (``post_run_cell``) is for. IPython 9.8+ sets
    ``result.execution_count`` for a cell kept out of the history too (9.8.0 line 3296), to the
    next cell's number; such a cell has none, so None."""
    count = getattr(result, "execution_count", None)
    info = getattr(result, "info", None)
    if info is not None and getattr(info, "store_history", True) is False:
        return None
    return count if isinstance(count, int) and not isinstance(count, bool) else None


def _cell(path: str, cells: Mapping[str, int]) -> int | None:
    number = cells.get(path)
    if isinstance(number, int):
        return number
    match = _INPUT_NAME.match(path)
    return int(match.group(1)) if match else None


@dataclass(frozen=True)
class Origin:
    """Where a stack leaves JAX: ``first`` is the innermost frame outside JAX (a library's or
    the user's), ``user`` the innermost frame that is the user's own code, and ``cell`` the
    innermost frame in a notebook cell; any may be None."""

    first: Site | None
    user: Site | None
    cell: Site | None

    @property
    def site(self) -> Site | None:
        """What ``%gpumem arrays`` names: the user's frame, else the library's."""
        return self.user or self.first


def origin_of(frames: Iterable[FrameTuple], cells: Mapping[str, int]) -> Origin:
    """Reduce a stack, innermost frame first, to its :class:`Origin`."""
    first = user = cell = None
    for path, line, function in frames:
        kind = kind_of(path)
        if kind == "internal":
            continue
        number = _cell(path, cells)
        site = Site(path, line, function, number, kind == "library")
        first = first or site
        if kind == "user":
            user = user or site
        if number is not None:
            cell = site
            break
    return Origin(first, user, cell)


# Per traceback: its frames outside JAX, and each one's code object (None where jaxlib gives no
# code objects; the traceback holds them anyway).
_by_traceback: dict[Any, tuple[tuple[FrameTuple, ...], tuple[Any, ...]]] = {}
# Per code object, by id: the object (so the id stays its own) and where its statement starts.
_places: dict[int, tuple[Any, tuple]] = {}


def _raw_codes(traceback: Any, count: int) -> list | None:
    """The code object of each frame, from ``Traceback.raw_frames()`` (jaxlib 0.4.38 to 0.11:
    ``(codes, lastis)``); None where they cannot be had."""
    try:
        codes, _ = traceback.raw_frames()
    except Exception:  # noqa: BLE001 - an older jaxlib: the frames alone serve
        return None
    return list(codes) if len(codes) == count else None


def _qualified_names(codes: list | None) -> list[str] | None:
    """Each frame's qualified name (``make.<listcomp>``), from the code objects of
    ``Traceback.raw_frames()``; None where they cannot be had. jaxlib 0.4.38's ``frames`` name
    functions by ``co_name`` (``__call__``), later ones by ``co_qualname``
    (``ExecuteReplicated.__call__``, 0.7.2 and 0.10.2, observed on their CPU wheels); the code
    objects give the same name on all."""
    try:
        return None if codes is None else [code.co_qualname for code in codes]
    except AttributeError:  # Python before 3.11
        return None


def _reduction(traceback: Any) -> tuple[tuple[FrameTuple, ...], tuple[Any, ...]]:
    """The frames of a jaxlib Traceback outside JAX, innermost first, and their code objects
    (None each where jaxlib gives none; kept per traceback)."""
    found = _by_traceback.get(traceback)
    if found is None:
        frames = traceback.frames
        codes = _raw_codes(traceback, len(frames))
        names = _qualified_names(codes) or [f.function_name for f in frames]
        kept = [i for i, f in enumerate(frames) if kind_of(f.file_name) != "internal"]
        found = (
            tuple((frames[i].file_name, frames[i].line_num, names[i]) for i in kept),
            tuple(codes[i] if codes else None for i in kept),
        )
        if len(_by_traceback) > 8192:  # code comes and goes; a few thousand stacks is plenty
            _by_traceback.clear()
            _places.clear()
        _by_traceback[traceback] = found
    return found


def _reduced(traceback: Any) -> tuple[FrameTuple, ...]:
    """The frames of a jaxlib Traceback outside JAX, innermost first (kept per traceback)."""
    return _reduction(traceback)[0]


NO_TRACEBACK = "(no traceback)"
INSIDE_JAX = "(inside JAX)"


def _per_traceback(answer: Callable[[Any], Any], without: Any) -> Callable[[Any], Any]:
    """``answer`` of each distinct jaxlib Traceback, asked once and remembered for this one
    listing (the cell numbers may change between listings); ``without`` for an array with none."""
    seen: dict[Any, Any] = {}

    def label(traceback: Any) -> Any:
        if traceback is None:
            return without
        found = seen.get(traceback)
        if found is None:
            found = seen[traceback] = answer(traceback)
        return found

    return label


def _site_text(traceback: Any, cells: Mapping[str, int]) -> str:
    site = origin_of(_reduced(traceback), cells).site
    return INSIDE_JAX if site is None else str(site)


def site_labeller(cells: Mapping[str, int]) -> Callable[[Any], str]:
    """A function from a jaxlib Traceback (an array's ``traceback``, maybe None) to its site as
    text, remembering each traceback's answer for this one listing."""
    return _per_traceback(lambda traceback: _site_text(traceback, cells), NO_TRACEBACK)


def _cell_text(path: str, line: int) -> str:
    """A cell's line as IPython cached it (``CachingCompiler.cache`` puts each cell's code in
    ``linecache.cache`` under its file name: IPython/core/compilerop.py, 8.39.0 and 9.8.0),
    stripped; "" where it is not cached. Never reads a file."""
    if path not in linecache.cache:
        return ""
    return linecache.getline(path, line).strip()


class Run(NamedTuple):
    """One execution of a cell statement, as an array's traceback shows it.

    ``statement``: the text of the line the cell was running (its file and line where the text is
    not cached), so one statement stays one wherever an edit moves it. ``file``: the cell's file
    name. ``place``: where that top-level statement starts in the file (``statement_place``).
    ``code``: the id of the code object IPython compiled for it that time (the file name where
    jaxlib gives no code objects).

    IPython runs a cell by compiling each of its top-level statements into a code object of its
    own, every time the cell runs (``run_cell_async`` names the cell's file once, ``cell_name =
    compiler.cache(...)``, then ``run_ast_nodes`` compiles ``Module([node], [])`` with
    ``compiler(mod, cell_name, mode)`` for each statement: IPython/core/interactiveshell.py,
    9.18.1 lines 3485, 3752 and 3760; 8.39.0 lines 3303, 3509 and 3517). So one execution of a
    cell gives one code object per place in its file, and a second execution of the same code
    a second one at each place: the number of executions is the number of code objects at one
    place of one file, not the number of code objects (two statements on one line are two code
    objects of one execution). The file name alone cannot tell executions apart: ipykernel names
    a cell's file by a hash of its code (``XCachingCompiler.get_code_name`` returns
    ``get_file_name(raw_code)``, ipykernel/compiler.py, 7.4), so identical runs share it, and
    Python 3.13 on interns ``co_filename`` (``_PyUnicode_InternMortal(interp,
    &co->co_filename)``, Objects/codeobject.c ``init_code``; seen on 3.13.0, not on 3.12.1), so
    equal names are one object there.
    """

    statement: str
    file: str
    place: tuple
    code: int | str


def statement_place(code: Any) -> tuple:
    """Where the statement compiled as ``code`` starts in its file: the first ``(line, column)``
    among its instructions' positions (``co_positions()``, Python 3.11+; the ``RESUME`` a module
    starts with is at line 0 on 3.11.7, 3.12.1 and 3.13.0, and is skipped). Statements never share
    source text, so two top-level statements of one cell, even on one line, start at two places,
    and the same statement compiled again starts at the same place. Before 3.11 (no columns):
    its first line and its bytecode, which tell apart two different statements on one line
    (checked on 3.10.13). ``()`` where the code object says nothing."""
    found = _places.get(id(code))
    if found is not None and found[0] is code:
        return found[1]
    try:
        positions = code.co_positions()
    except AttributeError:  # Python 3.10
        lines = [line for _, _, line in code.co_lines() if line]
        place: tuple = (min(lines), code.co_code) if lines else ()
    else:
        starts = [(line, column) for line, _, column, _ in positions if line and column is not None]
        place = min(starts) if starts else ()
    _places[id(code)] = (code, place)
    return place


@dataclass(frozen=True)
class Allocation:
    """Where one array was made, from its traceback alone.

    ``site``: what ``%gpumem arrays`` names (as ``site_labeller``). ``line``: that site's identity
    across re-runs: a cell's line by its function and its text, so the same line in cell [5] and
    in its re-run as cell [9] is one site (plain IPython names each run's file apart, ipykernel
    names it by a hash of the cell's text); a file's line by file, number and function.
    ``cell``: the number of the cell that was running, from the outermost frame in a cell.
    ``run``: the execution of the cell statement that made it (:class:`Run`), read from that
    outermost frame; None outside any cell.
    """

    site: str
    line: tuple
    cell: int | None = None
    run: Run | None = None


def _line_key(site: Site | None, label: str) -> tuple:
    if site is None:
        return (label,)
    text = _cell_text(site.file, site.line) if site.cell is not None else ""
    return ("cell", site.function, text) if text else (site.file, site.line, site.function)


def _allocation(traceback: Any, cells: Mapping[str, int]) -> Allocation:
    frames, codes = _reduction(traceback)
    site = origin_of(frames, cells).site
    label = INSIDE_JAX if site is None else str(site)
    for i in range(len(frames) - 1, -1, -1):  # outermost first: the statement the cell ran
        path, line, _ = frames[i]
        number = _cell(path, cells)
        if number is not None:
            statement = _cell_text(path, line) or f"{path}:{line}"
            code = codes[i]
            run = (
                Run(statement, path, statement_place(code), id(code))
                if code is not None
                else Run(statement, path, (), path)
            )
            return Allocation(label, _line_key(site, label), number, run)
    return Allocation(label, _line_key(site, label))


NO_ALLOCATION = Allocation(NO_TRACEBACK, (NO_TRACEBACK,))


def allocation_labeller(cells: Mapping[str, int]) -> Callable[[Any], Allocation]:
    """A function from a jaxlib Traceback (an array's ``traceback``, maybe None) to its
    :class:`Allocation`, one object per distinct traceback for this one listing."""
    return _per_traceback(lambda traceback: _allocation(traceback, cells), NO_ALLOCATION)


@dataclass(frozen=True)
class Growth:
    """A line whose live arrays come from ``runs`` executions of the same cell statement: a list
    that keeps more arrays each time a cell runs. ``site`` names its newest run's line."""

    site: str
    runs: int
    arrays: int
    nbytes: int

    def __str__(self) -> str:
        many = "array" if self.arrays == 1 else "arrays"
        return f"{self.site} keeps arrays from {self.runs} runs ({self.arrays} {many}, {format_bytes(self.nbytes)})"


def newest_labels(allocations: Iterable[Allocation]) -> dict[tuple, str]:
    """Each line's label as its newest run names it (the highest cell number)."""
    newest: dict[tuple, Allocation] = {}
    for a in allocations:
        known = newest.get(a.line)
        if known is None or (a.cell or -1) > (known.cell or -1):
            newest[a.line] = a
    return {line: a.site for line, a in newest.items()}


def executions(runs: Iterable[Run]) -> int:
    """The number of cell executions that ``runs``, all of one statement, come from: per file,
    the most code objects at one place (each execution compiles each place once; the statement's
    text may stand at several places of one cell), summed over the files (each edit of a cell,
    and each run under plain IPython, has a file of its own)."""
    codes: dict[tuple, set] = {}
    for run in runs:
        codes.setdefault((run.file, run.place), set()).add(run.code)
    per_file: dict[str, int] = {}
    for (file, _), found in codes.items():
        per_file[file] = max(per_file.get(file, 0), len(found))
    return sum(per_file.values())


def growing(made: Iterable[tuple[Allocation, int, int]]) -> list[Growth]:
    """The lines whose live arrays were made by two or more executions of one cell statement
    (``executions``), from ``(allocation, arrays, bytes)`` per distinct allocation; largest
    first."""
    made = list(made)
    labels = newest_labels(a for a, _, _ in made)
    totals: dict[tuple, list[int]] = {}
    runs: dict[tuple, dict[str, set[Run]]] = {}
    for a, arrays, nbytes in made:
        total = totals.setdefault(a.line, [0, 0])
        total[0] += arrays
        total[1] += nbytes
        if a.run is not None:
            runs.setdefault(a.line, {}).setdefault(a.run.statement, set()).add(a.run)
    found = []
    for line, statements in runs.items():
        most = max(executions(of_statement) for of_statement in statements.values())
        if most >= 2:
            found.append(Growth(labels[line], most, *totals[line]))
    return sorted(found, key=lambda g: (-g.nbytes, g.site))


def growth_sentence(found: Sequence[Growth]) -> str:
    """``Growing, run after run: ...`` naming the three largest of ``found``, or ``""``."""
    if not found:
        return ""
    more = f"; and {len(found) - 3} more" if len(found) > 3 else ""
    return "Growing, run after run: " + "; ".join(str(g) for g in found[:3]) + more + "."


def top_sites(made: Iterable[tuple[Any, int]], cells: Mapping[str, int], top: int = 3) -> list[tuple[str, int]]:
    """The ``top`` sites by bytes, ``(site, bytes)``, of arrays given as ``(traceback, bytes)``."""
    label = site_labeller(cells)
    totals: dict[str, int] = {}
    for traceback, size in made:
        text = label(traceback)
        totals[text] = totals.get(text, 0) + size
    return sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))[:top]


def frame_site(path: str, line: int, function: str, cells: Mapping[str, int]) -> Site:
    """One frame as a :class:`Site`, its cell number read from ``cells`` (or its
    ``<ipython-input-N-...>`` name) whatever kind of file it is."""
    kind = kind_of(path)
    return Site(path, line, function, _cell(path, cells), kind == "library")


def stack_origin(frame: Any, cells: Mapping[str, int]) -> Origin:
    """The :class:`Origin` of a live Python stack, from ``frame`` outwards."""
    frames = []
    while frame is not None:
        frames.append((frame.f_code.co_filename, frame.f_lineno or 0, frame.f_code.co_name))
        frame = frame.f_back
    return origin_of(frames, cells)


def forget() -> None:
    """Drop the kept reductions (tests)."""
    _by_traceback.clear()
    _places.clear()


__all__ = [
    "Site",
    "Origin",
    "kind_of",
    "cell_numbers",
    "counts_cells_first",
    "running_cell_number",
    "finished_cell_number",
    "origin_of",
    "site_labeller",
    "top_sites",
    "Allocation",
    "Run",
    "statement_place",
    "executions",
    "allocation_labeller",
    "Growth",
    "growing",
    "newest_labels",
    "stack_origin",
    "frame_site",
    "forget",
]
