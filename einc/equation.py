"""Stage 1, parse: equation text or sublists -> :class:`Equation`.

Pure Python (no torch, no triton).  An :class:`Equation` knows its operands' labels,
the output labels (given after ``->`` or derived as torch does), and a canonical
spelling in which labels are renamed in order of first appearance, so that
``ik,kj->ij`` and ``ab,bc->ac`` share one cache entry.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from .errors import ArgumentError, EquationError, OperandTypeError, caret

ELLIPSIS = "..."
_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


@functools.lru_cache(maxsize=2)
def _alphabet(wide: bool) -> tuple[str, ...]:
    stop = 0x110000 if wide else 0x3000
    return tuple(_LETTERS) + tuple(chr(c) for c in range(0xC0, stop) if chr(c).isalpha())


def letter(i: int) -> str:
    """The ``i``-th letter that :func:`parse` accepts: ``a``-``z``, ``A``-``Z``, then the
    alphabetic code points from U+00C0 on.  Every one is a letter, so generated equation
    *text* (canonical forms, sublists, gradients, vmap, the FX pass) always parses.

    >>> letter(0), letter(51), letter(52)
    ('a', 'Z', 'À')
    """
    table = _alphabet(False)
    if i >= len(table):
        table = _alphabet(True)
    return table[i]


@dataclass(frozen=True)
class Equation:
    """A parsed equation.

    ``inputs[k]`` holds the labels of operand ``k`` in dimension order, with
    :data:`ELLIPSIS` standing for the dimensions an ellipsis covers; ``output`` the
    output labels (always explicit here).  ``input_positions`` and
    ``output_positions`` give each label's offset in ``text``, for error carets.
    """

    text: str
    inputs: tuple[tuple[str, ...], ...]
    output: tuple[str, ...]
    explicit: bool
    input_positions: tuple[tuple[int, ...], ...]
    output_positions: tuple[int, ...]
    canonical: str

    @property
    def num_operands(self) -> int:
        return len(self.inputs)

    def term(self, k: int) -> str:
        """Operand ``k``'s subscripts as written, e.g. ``'bij'``."""
        return "".join(self.inputs[k])

    def where(self, k: int, dim_label: str | None = None) -> str:
        """The equation with a caret under operand ``k`` (or under one of its labels)."""
        pos = self.input_positions[k]
        if not pos:
            return caret(self.text, None)
        if dim_label is not None and dim_label in self.inputs[k]:
            return caret(self.text, pos[self.inputs[k].index(dim_label)])
        return caret(self.text, pos[0])


def _err(cls, msg: str, text: str, position: int | None):
    return cls(f"einsum(): {msg}\n{caret(text, position)}")


def _parse_term(text: str, start: int, stop: int, operand: str):
    """Labels and their positions in ``text[start:stop]`` (spaces skipped)."""
    labels: list[str] = []
    positions: list[int] = []
    i = start
    while i < stop:
        ch = text[i]
        if ch == " ":
            i += 1
        elif ch == ".":
            if text[i:i + 3] != "..." or i + 3 > stop:
                raise _err(EquationError, f"found '.' in {operand} that is not part of an ellipsis '...'",
                           text, i)
            if ELLIPSIS in labels:
                raise _err(EquationError, f"{operand} has a second ellipsis; at most one is allowed",
                           text, i)
            labels.append(ELLIPSIS)
            positions.append(i)
            i += 3
        elif ch.isalpha():
            labels.append(ch)
            positions.append(i)
            i += 1
        else:
            raise _err(EquationError,
                       f"invalid subscript {ch!r} at index {i} of the equation; subscripts are letters, "
                       "'...', ',' and '->'", text, i)
    return tuple(labels), tuple(positions)


@functools.lru_cache(maxsize=4096)
def parse(text: str) -> Equation:
    """Parse an equation string as ``torch.einsum`` reads it.

    >>> parse("ij,jk").output
    ('i', 'k')
    """
    if not isinstance(text, str):
        raise ArgumentError(f"einsum(): the equation must be a str, got {type(text).__name__}")
    arrow = text.find("->")
    lhs_stop = arrow if arrow >= 0 else len(text)
    for i, ch in enumerate(text):
        if ch in "->" and not (arrow >= 0 and arrow <= i <= arrow + 1):
            raise _err(EquationError, f"invalid subscript {ch!r} at index {i} of the equation; "
                       "'->' may appear once", text, i)
    inputs, input_positions = [], []
    start = 0
    while True:
        comma = text.find(",", start, lhs_stop)
        stop = lhs_stop if comma < 0 else comma
        labels, positions = _parse_term(text, start, stop, f"operand {len(inputs)}")
        inputs.append(labels)
        input_positions.append(positions)
        if comma < 0:
            break
        start = comma + 1
    if arrow >= 0:
        if text.find(",", arrow) >= 0:
            raise _err(EquationError, "the output (after '->') cannot contain ','", text,
                       text.find(",", arrow))
        output, output_positions = _parse_term(text, arrow + 2, len(text), "the output")
    else:
        output, output_positions = None, ()
    return _build(text, inputs, input_positions, output, output_positions)


def from_sublists(sublists, output) -> Equation:
    """Build an :class:`Equation` from torch's sublist format.

    ``sublists`` holds one list of ints (and ``...``) per operand; ``output`` is such a
    list or None.  Any non-negative int is an index (torch stops at 52).

    >>> from_sublists([[0, 1], [1, 2]], [0, 2]).text
    'ab,bc->ac'
    """
    def labels_of(sub, what):
        if not isinstance(sub, (list, tuple)):
            raise OperandTypeError(f"einsum(): the subscripts of {what} must be a list, "
                                   f"got {type(sub).__name__}")
        out = []
        for s in sub:
            if s is Ellipsis:
                out.append(ELLIPSIS)
            elif isinstance(s, int) and not isinstance(s, bool):
                if s < 0:
                    raise ArgumentError(f"einsum(): subscript {s} in the subscript list of {what} "
                                        "is negative; subscripts must be non-negative ints")
                out.append(letter(s))
            else:
                raise OperandTypeError(f"einsum(): subscript {s!r} in the subscript list of {what} "
                                       "is not an int or Ellipsis")
        return out

    inputs = [labels_of(s, f"operand {k}") for k, s in enumerate(sublists)]
    out = None if output is None else labels_of(output, "the output")
    # Render the text so that carets in messages point at real positions.
    text, input_positions = "", []
    for k, labels in enumerate(inputs):
        text += "," if k else ""
        positions = []
        for label in labels:
            positions.append(len(text))
            text += label
        input_positions.append(tuple(positions))
    output_positions = []
    if out is not None:
        text += "->"
        for label in out:
            output_positions.append(len(text))
            text += label
    return _build(text, [tuple(x) for x in inputs], input_positions,
                  None if out is None else tuple(out), tuple(output_positions))


def _build(text, inputs, input_positions, output, output_positions) -> Equation:
    seen = {label for labels in inputs for label in labels}
    has_ellipsis = ELLIPSIS in seen
    explicit = output is not None
    if explicit:
        for label, pos in zip(output, output_positions):
            if label != ELLIPSIS and label not in seen:
                raise _err(EquationError, f"output subscript {label!r} does not appear in any operand",
                           text, pos)
        for i, label in enumerate(output):
            if label in output[:i]:
                raise _err(EquationError, f"output subscript {label!r} appears more than once in the output",
                           text, output_positions[i])
    else:
        counts: dict[str, int] = {}
        for labels in inputs:
            for label in labels:
                counts[label] = counts.get(label, 0) + 1
        once = sorted(label for label, n in counts.items() if n == 1 and label != ELLIPSIS)
        output = ((ELLIPSIS,) if has_ellipsis else ()) + tuple(once)
    return Equation(text, tuple(inputs), tuple(output), explicit, tuple(input_positions),
                    tuple(output_positions), _canonical(inputs, output))


def _canonical(inputs, output) -> str:
    rename: dict[str, str] = {ELLIPSIS: ELLIPSIS}
    for labels in inputs:
        for label in labels:
            if label not in rename:
                rename[label] = letter(len(rename) - 1)
    lhs = ",".join("".join(rename[x] for x in labels) for labels in inputs)
    return lhs + "->" + "".join(rename[x] for x in output)
