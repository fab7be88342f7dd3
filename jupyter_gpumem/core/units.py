"""Byte counts and fractions as people write them, parsed and shown; text from elsewhere shown
with its control characters escaped (``printable``).

``parse_bytes("512MiB")``, ``parse_fraction("50%")``, ``format_bytes(1610612736) == "1.50 GiB"``.
Binary suffixes (KiB, MiB, GiB, TiB) and bare letters (K, M, G, T) count in powers of 1024, as
``ls -h`` and nvidia-smi do; KB, MB, GB and TB count in powers of 1000.
"""

from __future__ import annotations

import math
import re
import unicodedata

__all__ = ["parse_bytes", "parse_fraction", "format_bytes", "printable", "BYTE_UNITS"]

_BINARY = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "p": 10**15}

BYTE_UNITS = "B, KiB, MiB, GiB, TiB (or K, M, G, T), KB, MB, GB, TB"

_BYTES_RE = re.compile(r"^\s*(?P<num>\d+(?:\.\d*)?|\.\d+)\s*(?P<unit>[kmgtp]?(?:i?b)?)\s*$", re.IGNORECASE)


def parse_bytes(text: str | int) -> int:
    """A byte count from ``"1024"``, ``"512MiB"``, ``"2GiB"``, ``"1.5GB"`` or ``"500M"``.

    A count with a decimal point is rounded to the nearest byte after scaling. Anything else
    (negative numbers, unknown units) raises ValueError naming the accepted forms.
    """
    if isinstance(text, bool):
        raise ValueError(f"expected a byte count such as 512MiB or 2GiB, got {text!r}")
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"a byte count cannot be negative, got {text}")
        return text
    if not isinstance(text, str):
        raise ValueError(f"expected a byte count such as 512MiB or 2GiB, got {text!r}")
    match = _BYTES_RE.match(text)
    if not match:
        raise ValueError(
            f"{text!r} is not a byte count; write a whole number of bytes or a number with a unit "
            f"({BYTE_UNITS}), e.g. 512MiB, 2GiB, 1.5GB"
        )
    num, unit = match.group("num"), match.group("unit").lower()
    letter = unit[:1] if unit[:1] in _DECIMAL else ""
    rest = unit[len(letter) :]
    # The regex lets through a letter or none, then "", "b" or "ib".
    if rest == "b" and letter:
        scale = _DECIMAL[letter]  # KB, MB, GB: powers of 1000
    elif rest == "ib" and not letter:
        raise ValueError(f"{text!r} is not a byte count: 'iB' needs a prefix (KiB, MiB, GiB, TiB)")
    else:
        scale = _BINARY[letter]
    if "." in num:
        value = float(num) * scale
        if not math.isfinite(value):
            raise ValueError(f"{text!r} is too large")
        return int(round(value))
    return int(num) * scale


def parse_fraction(text: str | float) -> float:
    """A fraction of device memory from ``".5"``, ``"0.5"``, ``"50%"`` (or a number): 0 < F <= 1."""
    hint = "write a fraction in (0, 1] such as .5, 0.5 or 50%"
    if isinstance(text, bool):
        raise ValueError(f"expected a fraction, got {text!r}; {hint}")
    if isinstance(text, (int, float)):
        value = float(text)
        shown = repr(text)
    elif isinstance(text, str):
        shown = repr(text)
        body = text.strip()
        percent = body.endswith("%")
        if percent:
            body = body[:-1].strip()
        if not re.fullmatch(r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?", body):
            raise ValueError(f"{shown} is not a fraction; {hint}")
        value = float(body) / 100.0 if percent else float(body)
    else:
        raise ValueError(f"expected a fraction, got {text!r}; {hint}")
    if not math.isfinite(value) or not 0.0 < value <= 1.0:
        raise ValueError(f"{shown} is outside (0, 1]; write a fraction such as .5, 0.5 or 50%")
    return value


def format_bytes(n: int | float) -> str:
    """``n`` bytes in binary units with two decimals: ``"1.50 GiB"``; under 1 KiB, ``"512 B"``."""
    if isinstance(n, bool) or not isinstance(n, (int, float)) or (isinstance(n, float) and not math.isfinite(n)):
        raise ValueError(f"expected a number of bytes, got {n!r}")
    sign = "-" if n < 0 else ""
    size = abs(n)
    if size < 1024:
        return f"{sign}{int(size)} B"
    for unit in ("KiB", "MiB", "GiB"):
        size /= 1024.0
        # 1023.999 MiB would round to "1024.00 MiB"; show it in the next unit instead.
        if round(size, 2) < 1024:
            return f"{sign}{size:.2f} {unit}"
    return f"{sign}{size / 1024.0:.2f} TiB"


# Control and format characters (escapes, newlines, bidi overrides), line and paragraph
# separators, and surrogates (undecodable bytes): what could move a terminal's cursor or make
# text look like a line of its own.
_HIDDEN = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def printable(text: str) -> str:
    """``text`` with every control or format character written as its escape (``\\x1b``,
    ``\\n``, ``\\u202e``), for plain text that carries someone else's words (a process's
    command line): it can neither clear a terminal nor start a line that looks like ours.
    Letters, spaces and symbols of any script are kept as they are."""
    if text.isascii() and text.isprintable():
        return text
    return "".join(repr(c)[1:-1] if unicodedata.category(c) in _HIDDEN else c for c in text)
