"""The ``einc`` command line's argument types: each turns one option's text into its
value, or raises :class:`argparse.ArgumentTypeError` with the message argparse prints
(:func:`output_folder`, checked when a command runs, raises
:class:`~einc.errors.ArgumentError`).  Standard library only, like the command line's
own module.
"""

from __future__ import annotations

import argparse
import math
import tempfile
from pathlib import Path

from ..codegen.ir import DTYPE_ALIASES, DTYPE_NAMES
from ..errors import ArgumentError


def positive_int(text: str) -> int:
    """A whole number >= 1 (``--rounds``, ``--threads``); argparse reports anything else."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def _number(text: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not math.isfinite(x):
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds, got {text!r}")
    return x


def positive_float(text: str) -> float:
    """A finite number > 0 (``--budget``)."""
    x = _number(text)
    if x <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text}")
    return x


def non_negative_float(text: str) -> float:
    """A finite number >= 0 (``--wait``: 0 is "do not wait")."""
    x = _number(text)
    if x < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {text}")
    return x


def folder_name(text: str) -> str:
    """An output folder's name (``dump -o``, ``bench --out``): not empty."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path: name the output folder")
    return text


def output_folder(text: str, option: str) -> Path:
    """The output folder ``text`` of ``option``, created if missing and checked writable,
    before anything is computed or timed: one that names a file, or that cannot be
    created or written, is an :class:`ArgumentError` (exit status 2)."""
    out = Path(text)
    if out.exists() and not out.is_dir():
        raise ArgumentError(f"{option} {text}: names a file; {option} takes a folder (created if missing)")
    above = next((a for a in out.absolute().parents if a.exists()), None)
    if not out.exists() and above is not None and not above.is_dir():
        raise ArgumentError(f"{option} {text}: {above} is not a folder; {option} takes a folder (created if missing)")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ArgumentError(f"{option} {text}: cannot create the folder ({e.strerror or e})") from None
    try:
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as e:
        raise ArgumentError(f"{option} {text}: cannot write in the folder ({e.strerror or e})") from None
    return out


def parse_shapes(text: str) -> list[tuple[int, ...]]:
    """``'8x64x32,8x32x16'`` -> ``[(8, 64, 32), (8, 32, 16)]``; ``()`` is a 0-d operand.

    >>> parse_shapes("8x64x32, 64, ()")
    [(8, 64, 32), (64,), ()]
    """
    shapes = []
    for part in text.split(","):
        part = part.strip()
        if part == "()":
            shapes.append(())
            continue
        try:
            dims = tuple(int(d) for d in part.lower().split("x"))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"bad shape {part!r}: write each operand's sizes joined by 'x' and separate operands "
                "with commas, e.g. 8x64x32,8x32x16 (and () for a 0-d operand)") from None
        if any(d < 0 for d in dims):
            raise argparse.ArgumentTypeError(f"bad shape {part!r}: sizes cannot be negative")
        shapes.append(dims)
    return shapes


def parse_size(text: str) -> tuple[str, int]:
    """``'h=8'`` -> ``('h', 8)``: an axis size for a named equation (``--size h=8``)."""
    name, eq, value = text.partition("=")
    try:
        size = int(value)
    except ValueError:
        size = -1
    if not eq or not name.strip() or size < 0:
        raise argparse.ArgumentTypeError(f"bad size {text!r}: write NAME=N, e.g. h=8")
    return name.strip(), size


def parse_dtype(text: str) -> str:
    name = DTYPE_ALIASES.get(text.lower(), text.lower())
    if name not in DTYPE_NAMES:
        raise argparse.ArgumentTypeError(f"unknown dtype {text!r}; valid: {', '.join(DTYPE_NAMES)}")
    return name


__all__ = ["positive_int", "positive_float", "non_negative_float", "folder_name", "output_folder", "parse_shapes",
           "parse_size", "parse_dtype"]
