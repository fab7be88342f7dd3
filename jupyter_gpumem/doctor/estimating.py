"""Will this jitted call fit before it runs? ``%gpumem estimate EXPR``, from XLA's memory analysis."""

from __future__ import annotations

import ast
import dataclasses
from dataclasses import dataclass
from typing import Any

from jupyter_gpumem.core import metrics
from jupyter_gpumem.core.magic_args import Grammar, Option
from jupyter_gpumem.core.readings import AllocatorStats, DeviceReading, NotAvailable, Sample
from jupyter_gpumem.doctor.names import user_namespace
from jupyter_gpumem.doctor.text import PreReport, bytes_or_na, pretty_as_text
from jupyter_gpumem.sources import host_memory, jax_arrays


@dataclass(frozen=True)
class EstimateReport(PreReport):
    """A compiled call's memory against what is free now."""

    _html_class = "jupyter-gpumem-estimate"
    _repr_pretty_ = pretty_as_text

    expression: str
    memory: jax_arrays.CompiledMemory
    needed: int  # bytes the call allocates beyond its arguments: outputs + temporaries - aliased
    verdict: str  # "fits", "does not fit", "fits only after defragmenting", "unknown"
    measure: str
    largest_block: int | None
    total_free: int | None

    def lines(self) -> list[str]:
        m = self.memory
        out = [
            f"{self.expression}: {self.verdict}: {self.why()}"
            + ("" if m.jitted else " (not jitted: estimated as jax.jit of it, its array arguments traced)"),
            f"  arguments {bytes_or_na(m.argument_bytes)}, outputs {bytes_or_na(m.output_bytes)}, temporaries {bytes_or_na(m.temp_bytes)}, "
            f"aliased {bytes_or_na(m.alias_bytes)}, code {bytes_or_na(m.code_bytes)}"
            + (f", XLA peak {bytes_or_na(m.peak_bytes)}" if m.peak_bytes else ""),
            f"  needs {bytes_or_na(self.needed)} beyond its arguments; largest free block {bytes_or_na(self.largest_block)}, "
            f"free in total {bytes_or_na(self.total_free)}; from {self.measure}",
        ]
        return out

    def why(self) -> str:
        """The numbers behind the verdict: what the call needs against what is free."""
        if self.verdict == "unknown":
            return f"needs {bytes_or_na(self.needed)}; how much is free cannot be read here"
        if self.verdict == "fits only after defragmenting":
            return (
                f"needs {bytes_or_na(self.needed)} of {bytes_or_na(self.total_free)} free, but its largest piece "
                f"({bytes_or_na(self.largest_piece)}) is larger than the largest free block ({bytes_or_na(self.largest_block)})"
            )
        if self.verdict == "does not fit":
            return f"needs {bytes_or_na(self.needed)}, only {bytes_or_na(self.total_free)} free"
        return f"needs {bytes_or_na(self.needed)}, {bytes_or_na(self.total_free)} free"

    @property
    def largest_piece(self) -> int:
        """The largest single allocation: the outputs or the temporaries, whichever is larger."""
        return max(self.memory.output_bytes, self.memory.temp_bytes)


def _verdict(needed: int, largest_piece: int, largest_block: int | None, total_free: int | None) -> str:
    if largest_block is None or total_free is None:
        return "unknown"
    if needed <= total_free and largest_piece <= largest_block:
        return "fits"
    if needed <= total_free:
        return "fits only after defragmenting"
    return "does not fit"


def room_now(sample: Sample) -> tuple[int | None, int | None, str]:
    """``(largest block, free in total, measure)``: what a new call could get on the first
    device with allocator statistics, by ``model``'s metrics, as the monitor reads it.

    The pool's free bytes plus its growth: BFC's largest free block and headroom (capped by
    NVML's free bytes); under cuda_async the driver pool's unused bytes and the device's free
    bytes, as no fraction caps that pool. On the CPU, host memory available.
    """
    jax_devices = () if isinstance(sample.jax, NotAvailable) else sample.jax
    reading = next((r for r in jax_devices if isinstance(r.stats, AllocatorStats)), None)
    if reading is None:
        host = host_memory.available_bytes()
        return host, host, "host memory available (CPU: no allocator statistics)"
    stats, pool = reading.stats, reading.cuda_pool
    device = sample.device(reading.nvml_index) if reading.nvml_index is not None else None
    device_free = device.free_bytes if isinstance(device, DeviceReading) else None
    largest = metrics.largest_likely_request(stats, pool, device_free=device_free)
    total = metrics.available_bytes(stats, pool, device_free=device_free)
    if metrics.uses_driver_pool(stats, pool):
        measure = (
            f"cuda_async on device {reading.jax_id}: the driver pool's unused bytes and the device's free "
            "memory; no fraction caps that pool"
        )
        if device_free is None:
            measure += " (the device's free memory cannot be read here)"
    else:
        measure = f"allocator statistics of device {reading.jax_id}"
    return largest, total, measure


def estimate_report(expression: str, memory: jax_arrays.CompiledMemory, sample: Sample) -> EstimateReport:
    """Judge ``memory`` (a compiled call's needs) against the room on the device in ``sample``."""
    needed = max(0, memory.output_bytes + memory.temp_bytes - memory.alias_bytes)
    largest_block, total_free, measure = room_now(sample)
    report = EstimateReport(expression, memory, needed, "unknown", measure, largest_block, total_free)
    verdict = _verdict(needed, report.largest_piece, largest_block, total_free)
    return dataclasses.replace(report, verdict=verdict)


def estimate(callee: Any, *args: Any, _expression: str = "", **kwargs: Any) -> EstimateReport:
    """Compile ``callee(*args, **kwargs)`` without running it and judge whether it fits now."""
    from jupyter_gpumem.sampling.sampler import get_sampler

    memory = jax_arrays.compile_memory(callee, args, kwargs)
    return estimate_report(_expression or getattr(callee, "__name__", "call"), memory, get_sampler().sample_once())


ESTIMATE_ARGS = Grammar("%gpumem estimate", positionals=(Option("expression", "EXPR", required=True),))


def magic_estimate(argv: list[str], shell: Any) -> EstimateReport:
    """``%gpumem estimate f(x, y)``: the call is compiled for its arguments, never run."""
    text = ESTIMATE_ARGS.parse(argv)["expression"].strip()
    callee, args, kwargs = evaluate_call(text, shell, "estimate")
    return estimate(callee, *args, _expression=text, **kwargs)


def evaluate_call(text: str, shell: Any, command: str) -> tuple[Any, list, dict]:
    """``(callee, args, kwargs)`` of the call written in ``text``, each part evaluated in the
    user's namespace; the call itself is not made. Raises ValueError naming what was wrong
    (not an expression, not a call, a part that failed, a callee that is not callable)."""
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as err:
        raise ValueError(f"{command}: {text!r} is not a Python expression ({err.msg})") from None
    call = tree.body
    if not isinstance(call, ast.Call):
        raise ValueError(f"{command} takes a call such as train_step(params, batch), got {text!r}")
    ns = user_namespace(shell)

    def value(node: ast.AST) -> Any:
        code = compile(ast.Expression(node), f"<gpumem {command}>", "eval")
        try:
            return eval(code, ns)  # the user's own expression, in the user's namespace
        except Exception as err:
            raise ValueError(
                f"{command}: evaluating {ast.unparse(node)!r} failed: {type(err).__name__}: {err}"
            ) from None

    callee = value(call.func)
    if not callable(callee):
        raise ValueError(f"{command}: {ast.unparse(call.func)!r} is not callable")
    args: list[Any] = []
    for a in call.args:
        if isinstance(a, ast.Starred):
            args.extend(value(a.value))
        else:
            args.append(value(a))
    kwargs: dict[str, Any] = {}
    for k in call.keywords:
        if k.arg is None:
            kwargs.update(value(k.value))
        else:
            kwargs[k.arg] = value(k.value)
    return callee, args, kwargs
