"""Which jitted call ran out of memory, and what does its program need by itself? Found in the
error's traceback, with its arguments, and compiled again without running it.

Under IPython, JAX keeps its own frames in the traceback (``__tracebackhide__``, jax/_src/
traceback_util.py, 0.10.2), among them ``cache_miss(*args, **kwargs)`` in jax/_src/pjit.py,
whose locals hold the call's arguments and the Python function (``fun``). A call that hit
jaxlib's compiled fast path has no Python frame of JAX's: then the user's line is read, and a
call on it of a jitted function with plain names as arguments is taken from the frame's names.
Arguments are lowered as shapes, dtypes and shardings only (``abstract_arrays``), so no buffer
is read; the compilation is the one the failing call just made, so JAX answers from its cache.
"""

from __future__ import annotations

import ast
import linecache
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from jupyter_gpumem.core import sites
from jupyter_gpumem.doctor.hlo_sources import ops_at_frames, stack_frames
from jupyter_gpumem.sources import jax_arrays

_PJIT = ("jax", "_src", "pjit.py")
# An eager operation (jnp.zeros outside jit) runs as ``jit(prim_fun)`` with ``prim_fun.__name__ =
# prim.name`` (xla_primitive_callable, jax/_src/dispatch.py, jax-v0.4.38 to jax-v0.11.0).
_DISPATCH = ("jax", "_src", "dispatch.py")


@dataclass(frozen=True)
class ProgramBudget:
    """The failing jitted call's own memory, from its program compiled again without running
    (``memory_analysis``): bytes of arguments, outputs, temporaries, code and aliased (outputs
    written into donated arguments). ``donated``: some argument is donated already;
    ``donation_gain``: output bytes that could reuse a non-donated argument of the same shape;
    ``frames``: ``stack_frame_id -> (file, line, function)`` from its optimised module's tables,
    where they were asked for (``hlo_sources.stack_frames``), and ``frame_ops``, the ``(op_name,
    stack_frame_id)`` pairs its instructions carry (``hlo_sources.ops_at_frames``)."""

    call: str
    argument_bytes: int
    output_bytes: int
    temp_bytes: int
    code_bytes: int
    alias_bytes: int
    donated: bool = False
    donation_gain: int = 0
    frames: Mapping[int, tuple[str, int, str]] = field(default_factory=dict)
    frame_ops: frozenset[tuple[str, int]] = frozenset()

    @property
    def needs(self) -> int:
        """What running it adds beside its arguments: outputs, temporaries and code, less aliased."""
        return max(0, self.output_bytes + self.temp_bytes + self.code_bytes - self.alias_bytes)


def _is_pjit_cache_miss(frame: Any) -> bool:
    code = frame.f_code
    return code.co_name == "cache_miss" and code.co_filename.replace("\\", "/").endswith("/".join(_PJIT))


def _is_jitted(value: Any) -> bool:
    """A ``jax.jit`` object (jaxlib's PjitFunction), told by its type alone: the user's other
    objects are never asked for an attribute, which could run their code."""
    kind = type(value)
    return kind.__name__ == "PjitFunction" and kind.__module__.startswith("jaxlib")


def _jitted_for(fun: Any, frame: Any) -> Any:
    """The jitted object in ``frame``'s names that wraps ``fun`` (keeping its static and donated
    arguments), else ``fun`` itself."""
    if frame is not None:
        for names in (frame.f_locals, frame.f_globals):
            for value in list(names.values()):
                if _is_jitted(value) and getattr(value, "__wrapped__", None) is fun:
                    return value
    return fun


def _line(frame: Any, lineno: int | None) -> str:
    """The source of line ``lineno`` of ``frame``'s code (its current line where None)."""
    return linecache.getline(frame.f_code.co_filename, (lineno if lineno is not None else frame.f_lineno) or 0).strip()


def _call_on_line(frame: Any, lineno: int | None = None) -> tuple[Any, tuple, dict] | None:
    """A call on the frame's line ``lineno`` (its current line where None) of a jitted function,
    its arguments plain names."""
    line = _line(frame, lineno)
    try:
        tree = ast.parse(line.rstrip(":"), mode="exec")
    except SyntaxError:
        return None
    names = {**frame.f_globals, **frame.f_locals}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        callee = names.get(node.func.id)
        plain = all(isinstance(a, ast.Name) and a.id in names for a in node.args)
        plain = plain and all(k.arg and isinstance(k.value, ast.Name) and k.value.id in names for k in node.keywords)
        if _is_jitted(callee) and plain:
            return callee, tuple(names[a.id] for a in node.args), {k.arg: names[k.value.id] for k in node.keywords}
    return None


def _is_eager_operation(fun: Any) -> bool:
    """Whether ``fun`` is JAX's wrapper for one primitive run outside jit (``prim_fun``)."""
    filename = getattr(getattr(fun, "__code__", None), "co_filename", "")
    return isinstance(filename, str) and filename.replace("\\", "/").endswith("/".join(_DISPATCH))


def _called_on_line(frame: Any, lineno: int | None = None) -> str | None:
    """What the frame's line calls first (outermost), as written: ``jnp.zeros``."""
    line = _line(frame, lineno)
    try:
        tree = ast.parse(line.rstrip(":"), mode="exec")
    except SyntaxError:
        return None
    for node in ast.walk(tree):  # breadth first: the outermost call comes first
        if isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute)):
            return ast.unparse(node.func)
    return None


def _call_name(fun: Any, caller: Any, lineno: int | None = None) -> str:
    """The call as the user knows it: a jitted function's name; for an eager operation, what the
    user's line calls (``jnp.zeros``), with the primitive JAX ran it as."""
    name = getattr(getattr(fun, "__wrapped__", fun), "__name__", "the call")
    if caller is not None and _is_eager_operation(getattr(fun, "__wrapped__", fun)):
        written = _called_on_line(caller, lineno)
        if written:
            return f"{written} (run eagerly as {name})"
    return name


def find_call(error: BaseException, cells: Any = None) -> tuple[Any, tuple, dict, str, str] | None:
    """``(callee, args, kwargs, where, name)`` of the jitted call that failed, or None. The user's
    line is the one the traceback names (``tb_lineno``): a frame that caught the error and raised
    it again is at its ``raise`` by now."""
    caller, lineno = None, None
    tb = error.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if _is_pjit_cache_miss(frame):
            fun, args, kwargs = frame.f_locals.get("fun"), frame.f_locals.get("args"), frame.f_locals.get("kwargs")
            if fun is not None and isinstance(args, tuple):
                callee = _jitted_for(fun, caller)
                where = _where(caller, cells, lineno)
                return callee, args, dict(kwargs or {}), where, _call_name(callee, caller, lineno)
        if sites.kind_of(frame.f_code.co_filename) == "user":
            caller, lineno = frame, tb.tb_lineno
        tb = tb.tb_next
    if caller is not None:
        found = _call_on_line(caller, lineno)
        if found is not None:
            return (*found, _where(caller, cells, lineno), _call_name(found[0], caller, lineno))
    return None


def _where(frame: Any, cells: Any, lineno: int | None = None) -> str:
    if frame is None:
        return "an unknown line"
    line = (lineno if lineno is not None else frame.f_lineno) or 0
    origin = sites.origin_of([(frame.f_code.co_filename, line, frame.f_code.co_name)], cells or {})
    return str(origin.site) if origin.site is not None else frame.f_code.co_filename


def donation_gain(inputs: tuple, outputs: tuple) -> int:
    """Bytes of outputs that could take over a non-donated input's buffer (same shape and dtype),
    matched one to one after the outputs that already alias a donated input: what more
    ``donate_argnums`` could save."""
    donated = Counter((shape, dtype) for shape, dtype, _, given in inputs if given)
    free = Counter((shape, dtype) for shape, dtype, _, given in inputs if not given)
    gain = 0
    for shape, dtype, size in outputs:
        key = (shape, dtype)
        if donated[key] > 0:
            donated[key] -= 1
        elif free[key] > 0:
            free[key] -= 1
            gain += size
    return gain


def call_as_shapes(error: BaseException, shell: Any = None) -> tuple[Mapping[str, int], tuple | None]:
    """``(cells, found)``: the shell's cell files to their numbers, and the failing jitted call as
    ``find_call`` gives it, its arguments and keywords as shapes (``abstract_arrays``), or None."""
    from jupyter_gpumem.doctor.names import current_shell

    cells = sites.cell_numbers(shell if shell is not None else current_shell())
    found = find_call(error, cells)
    if found is None:
        return cells, None
    callee, args, kwargs, where, name = found
    return cells, (callee, jax_arrays.abstract_arrays(args), jax_arrays.abstract_arrays(kwargs), where, name)


def program_budget(error: BaseException, shell: Any = None, read_frames: bool = False) -> ProgramBudget | None:
    """The failing jitted call's program budget, or None where no call is found or it cannot be
    compiled again. ``read_frames``: read its module's stack-frame tables too (the error's text
    names sources by frame id: JAX 0.8 and later), from the same compiled program."""
    try:
        _, found = call_as_shapes(error, shell)
        if found is None:
            return None
        callee, args, kwargs, where, name = found
        memory = jax_arrays.compile_memory(callee, args, kwargs, with_hlo=read_frames)
        frames = stack_frames(memory.hlo) if memory.hlo else {}
        frame_ops = ops_at_frames(memory.hlo) if memory.hlo else frozenset()
    except Exception:  # tracing the user's function again may raise anything; the report must still show
        return None
    return ProgramBudget(
        call=f"{name} ({where})",
        argument_bytes=memory.argument_bytes,
        output_bytes=memory.output_bytes,
        temp_bytes=memory.temp_bytes,
        code_bytes=memory.code_bytes,
        alias_bytes=memory.alias_bytes,
        donated=any(donated for *_, donated in memory.inputs),
        donation_gain=donation_gain(memory.inputs, memory.outputs),
        frames=frames,
        frame_ops=frame_ops,
    )
