"""Stage 1, parse: equation text or sublists -> :class:`Equation`.

Pure Python (no torch, no triton).  An :class:`Equation` knows its operands' labels,
the output labels (given after ``->`` or derived as torch does), and a canonical
spelling in which labels are renamed in order of first appearance, so that
``ik,kj->ij`` and ``ab,bc->ac`` share one cache entry.
"""

from __future__ import annotations

import collections
import functools
import numbers
import operator
import re
from dataclasses import dataclass

import opt_einsum

from ..errors import ArgumentError, EquationError, OperandTypeError, caret

ELLIPSIS = "..."
_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
# Every character from U+00C0 on is an index, letter or not: opt_einsum.get_symbol writes
# them past its 52 letters ('×' is get_symbol(75), then '÷', combining marks, CJK...), and
# opt_einsum and the equations its tools and the einsum benchmark publish use them.
# None of einc's syntax ('.', ',', '->', ' ') lies there.
SYMBOLS_FROM = "\u00c0"
# A mark of named notation (einc.planner.notation): a parenthesis, or whitespace between
# two axis characters.  Whitespace from U+00C0 on (get_symbol(5620) is U+1680, the Ogham
# space mark; U+2000-U+200A, U+3000 follow) is an index, as opt_einsum reads it, not a space.
# The whitespace below U+00C0 is spelled out: a class that reaches U+10FFFF
# (``[^\S\u00c0-\U0010ffff]``) costs the re module a walk over its range to compile, which every
# process paid at ``import einc``.
_SPACES = "".join(c for c in map(chr, range(0xC0)) if c.isspace())
NAMED_MARK = re.compile(rf"[()]|\w[{_SPACES}]+\w")
# A name of named notation: a run of characters that are no syntax of either notation (the
# syntax and whitespace lie below U+00C0; every character from there on is a name's).
_WORD = re.compile(rf"[^{_SPACES},.()\->]+")


@functools.lru_cache(maxsize=2)
def _alphabet(wide: bool) -> tuple[str, ...]:
    stop = 0x110000 if wide else 0x3000
    return tuple(_LETTERS) + tuple(filter(str.isalpha, map(chr, range(0xC0, stop))))


# The letters below U+3000, as one str: dynamo reads a str global as a constant where it traces
# :func:`parse` (a named equation's ``out=``), and would trace the table's making, code point by
# code point, through the cache of :func:`_alphabet` (it took most of such a call's trace).
_NARROW = "".join(_alphabet(False))


def letter(i: int) -> str:
    """The ``i``-th letter that :func:`parse` accepts: ``a``-``z``, ``A``-``Z``, then the
    alphabetic code points from U+00C0 on.  Every one is a letter, so generated equation
    *text* (canonical forms, sublists, gradients, vmap, the FX pass) always parses.

    >>> letter(0), letter(51), letter(52)
    ('a', 'Z', 'À')
    """
    return _NARROW[i] if i < len(_NARROW) else _alphabet(True)[i]


def term_text(indices) -> str:
    """One term's text: a letter (:func:`letter`) per int index."""
    return "".join([letter(i) for i in indices])


def text_of(inputs, output) -> str:
    """The equation text of int-index terms: ``text_of([(0, 1), (1, 2)], (0, 2)) == "ab,bc->ac"``
    (the one way graph, step and slice indices are written back as text)."""
    return ",".join([term_text(t) for t in inputs]) + "->" + term_text(output)


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

    @functools.cached_property
    def two_operands(self) -> bool:
        """Whether the equation takes two operands: the engine's hit builds such a call's key
        inline, and reads this (an attribute once read) where ``len()`` would be a call."""
        return len(self.inputs) == 2

    @functools.cached_property
    def torch_text(self) -> str:
        """The spelling to hand torch.einsum for the same call (torch's choice of ops, and
        so its result dtype, can depend on the order of the labels): the text as written
        where torch reads it (einc's sublist letters are torch's below 52), else the labels
        renamed into torch's alphabet in the same order; the canonical form beyond 52.
        Worked out once per equation (each size class of a call reads it)."""
        if all(ch in _LETTERS or ch in ".,-> " for ch in self.text):
            return self.text
        labels = sorted({x for t in self.inputs for x in t if x != ELLIPSIS})
        if len(labels) > len(_LETTERS):
            return self.canonical
        rank = dict(zip(labels, sorted(_LETTERS)))
        return "".join(rank.get(ch, ch) for ch in self.text)

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


def _err(cls, msg: str, text: str, position: int | None, many: str | None = None):
    """The error, its message torch.einsum's sentence for one or two operands; ``many``,
    opt_einsum's sentence, which torch.einsum's message starts with for three or more
    (its path search parses the equation first), is kept on it as ``many`` for the caller
    that knows how many operands were passed (:func:`for_operands`)."""
    error = cls(f"einsum(): {msg}\n{caret(text, position)}")
    error.many = None if many is None else cls(f"einsum(): {many}: {msg}\n{caret(text, position)}")
    return error


def for_operands(error: Exception, n: int) -> Exception:
    """``error`` as torch.einsum words it for ``n`` operands."""
    many = getattr(error, "many", None)
    return many if n >= 3 and many is not None else error


def parse_as_called(text: str, n: int) -> Equation:
    """:func:`parse`, its error worded as torch.einsum words it for ``n`` operands."""
    try:
        return parse(text)
    except EquationError as error:
        raise for_operands(error, n) from None


def _parse_term(text: str, start: int, stop: int, operand: str):
    """Labels and their positions in ``text[start:stop]`` (spaces skipped).

    Messages start with torch.einsum's sentence for the same mistake.
    """
    labels: list[str] = []
    positions: list[int] = []
    i = start
    while i < stop:
        ch = text[i]
        if ch == " ":
            i += 1
        elif ch == ".":
            if ELLIPSIS in labels:
                already = ("but an ellipsis (...) was already found" if operand == "output"
                           else "for which an ellipsis was already found")
                raise _err(EquationError, f"found '.' for {operand} {already}; each term takes at most one "
                           "ellipsis '...'", text, i, _dots(operand, text))
            if text[i:i + 3] != "..." or i + 3 > stop:
                tail = " (...)" if operand == "output" else ""
                raise _err(EquationError, f"found '.' for {operand} that is not part of any ellipsis{tail}; "
                           "an ellipsis is three dots '...'", text, i, _dots(operand, text))
            labels.append(ELLIPSIS)
            positions.append(i)
            i += 3
        elif ch.isalpha() or ch >= SYMBOLS_FROM:
            labels.append(ch)
            positions.append(i)
            i += 1
        else:
            raise _err(EquationError, _invalid(ch, i) + _named_hint(text, i), text, i)
    return tuple(labels), tuple(positions)


def _dots(operand: str, text: str) -> str:
    """opt_einsum's sentence for a misplaced '.': its check of the operands' terms, or, in
    the output, of the characters left once each '...' is taken out."""
    if operand != "output":
        return "Invalid Ellipses"
    left = text[text.find("->") + 2:].replace("...", "").count(".")
    return "Output character '.' " + ("did not appear in the input" if left == 1 else
                                      "appeared more than once in the output")


def _invalid(ch: str, i: int) -> str:
    return (f"invalid subscript given at index {i} in the equation string, subscripts must be in [a-zA-Z]: "
            f"{ch!r} is not a letter (einc takes any letter, and any character from U+00C0 on, as "
            "opt_einsum.get_symbol writes them), '...', ',' or one '->'")


def _named_hint(text: str, i: int) -> str:
    """Where the character at ``i`` is part of a name such as ``x1`` in a text that named
    notation does not claim (no mark): how to write it as named axes."""
    if NAMED_MARK.search(text):
        return ""
    words = list(_WORD.finditer(text))
    word = next((m for m in words if m.start() <= i < m.end()), None)
    if word is None or len(word.group()) < 2 or not all(m.group().isidentifier() or m.group() == "1" for m in words):
        return ""
    forced = text[:word.start()] + f"({word.group()})" + text[word.end():]
    return (f"; {word.group()!r} is one axis name only in einc's named notation, which reads an equation that "
            f"has a parenthesis or a space between two axis names: {forced!r}")


def spaced_names_hint(text: str) -> str:
    """For a text torch reads that looks written by name (a space between two names of
    several letters, as ``"head dim, dim -> head"``): that each letter is one index, and how
    to have it read by name; else ``""``.  Said where its subscripts do not fit the shapes."""
    if "(" in text or "->" not in text or not NAMED_MARK.search(text):
        return ""
    words = _WORD.findall(text)
    if not any(len(w) > 1 for w in words) or len(words) < 2:
        return ""
    at = _WORD.search(text)
    forced = text[:at.start()] + f"({at.group()})" + text[at.end():]
    return (f" (each letter is one index, as torch reads the text, spaces ignored; to read names of several "
            f"letters as one axis each, put one axis in parentheses: {forced!r})")


def _named_letters(text: str) -> int | None:
    """Where ``text`` holds a character torch refuses (a letter beyond a-z and A-Z), a mark
    of named notation (:data:`NAMED_MARK`) and a name of several characters, the position
    of the first such character: the text is named notation's, as an ASCII one torch
    refuses is, not one index per letter (torch reads none of it, so no meaning of torch's
    is at stake; where every name is one character both readings agree)."""
    if text.isascii() or not NAMED_MARK.search(text):
        return None
    if any(len(word) > 1 for word in _WORD.findall(text)):
        return next(k for k, c in enumerate(text) if not c.isascii())
    return None


def opt_einsum_text(text: str) -> tuple[str, tuple]:
    """``(text, labels)``: ``text`` as opt_einsum reads it -- every character but ``,``,
    ``.``, the space and one ``->`` an index (``"i1,1j->ij"``) -- in letters :func:`parse`
    takes: each character it does not take is replaced in place by a letter ``text`` does
    not use (``labels``: ``((letter, character), ...)``), and an implied output is written
    out as opt_einsum implies it (the ellipsis, then the characters that appear once,
    sorted).  ``(text, ())`` where nothing needs replacing.  A ``-`` or ``>`` outside one
    ``->`` raises :class:`~einc.errors.EquationError`, with opt_einsum's sentence.

    >>> opt_einsum_text("i1,1j")
    ('ia,aj->ij', (('a', '1'),))
    """
    arrows = text.count("->")
    if arrows > 1 or text.count("-") != arrows or text.count(">") != arrows:
        at = next((k for k, c in enumerate(text) if c in "->" and "->" not in (text[k:k + 2], text[k - 1:k + 1])),
                  text.rfind("->"))     # (a stray '-' or '>', else the second arrow)
        raise EquationError(f"contract(): subscripts can only contain one '->' (the opt_einsum doors read any "
                            f"other character but ',', '.' and spaces as an index)\n  {text}\n  {' ' * at}^")
    odd = [c for c in dict.fromkeys(text) if c not in ".,->" and c != " " and not (c.isalpha() or c >= SYMBOLS_FROM)]
    if not odd:
        return text, ()
    free = (c for c in map(letter, range(len(text) + len(odd))) if c not in text)
    mine = {c: next(free) for c in odd}
    if not arrows:
        chars = [c for c in text if c not in ".," and c != " "]
        text += "->" + ("..." if "..." in text else "") + "".join(sorted(c for c in set(chars) if chars.count(c) == 1))
    return "".join([mine.get(c, c) for c in text]), tuple((a, c) for c, a in mine.items())


def term_spans(text: str, start: int, stop: int) -> list:
    """``(start, stop)`` of each comma-separated term of ``text[start:stop]`` (the operands'
    side of an equation), in order."""
    spans = []
    while True:
        comma = text.find(",", start, stop)
        spans.append((start, stop if comma < 0 else comma))
        if comma < 0:
            return spans
        start = comma + 1


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
            raise _err(EquationError, _invalid(ch, i), text, i, "Subscripts can only contain one '->'")
    at = _named_letters(text)
    if at is not None:
        raise _err(EquationError, f"invalid subscript given at index {at} in the equation string, subscripts must "
                   f"be in [a-zA-Z]: {text[at]!r} is not a letter torch takes, and the equation has names of several "
                   "characters, which einc reads in named notation (einc reads its letters beyond a-z and A-Z one "
                   "index each only where no name is longer than one character)", text, at)
    inputs, input_positions = [], []
    for start, stop in term_spans(text, 0, lhs_stop):
        labels, positions = _parse_term(text, start, stop, f"operand {len(inputs)}")
        inputs.append(labels)
        input_positions.append(positions)
    if arrow >= 0:
        if text.find(",", arrow) >= 0:
            raise _err(EquationError, _invalid(",", text.find(",", arrow)) + "; the output (after '->') is "
                       "one term", text, text.find(",", arrow))
        output, output_positions = _parse_term(text, arrow + 2, len(text), "output")
    else:
        output, output_positions = None, ()
    return _build(text, inputs, input_positions, output, output_positions)


# Sublist labels, in the order of their ints: 0-25 are 'A'-'Z' and 26-51 'a'-'z' (as in
# torch), then the letters of :func:`letter` from 52 on.  The order matters: an implicit
# output lists its labels sorted, and torch sorts sublist labels by their ints.  A plain
# str, so that dynamo reads it as a constant when it traces :func:`sublist_equation`.
_SUBLIST_LETTERS = _LETTERS[26:] + _LETTERS[:26] + _NARROW[52:]
SUBLIST_REACH = len(_SUBLIST_LETTERS)      # sublist ints below this are lettered without the wide alphabet


def sublist_equation(args) -> tuple[str, list]:
    """torch's sublist call ``(op0, sub0, op1, sub1, ..., [output])`` -> ``(text, operands)``.

    A sublist is any sequence of non-negative ints (numpy arrays, 1-d integer tensors,
    ``range``, numpy integers and bools, as 0 and 1, too) and ``Ellipsis``; any int is an index (torch stops
    at 52; einc at the last letter it has, past 137,000).  Plain
    Python, so that dynamo traces it under torch.compile.

    >>> sublist_equation(("x", [0, 1], "y", [1, 30]))
    ('AB,Be', ['x', 'y'])
    """
    if len(args) < 2:
        raise ArgumentError("einsum(): must specify the equation string and at least one operand, "
                            "or at least one operand and its subscripts list")
    n = len(args) // 2
    operands = [args[2 * k] for k in range(n)]
    text = ",".join([_sublist_term(args[2 * k + 1], f"operand {k}") for k in range(n)])
    if len(args) % 2:
        text += "->" + _sublist_term(args[-1], "output")
    return text, operands


def no_equation(first) -> str:
    """torch's error where an einsum call's first argument is neither an equation nor the
    sublist format's first operand (torch's parser reads a bytes equation with up to two
    operands; einc takes a str: docs/semantics.md)."""
    kind = type(first)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    return (f"einsum(): argument 'equation' (position 1) must be str, not {name}: the first argument is the "
            "equation string, or in the sublist format the first operand, a tensor")


def call_form(args) -> tuple[str, list]:
    """``(equation text, operands)`` of an einsum call's positional arguments: the string
    form ``(equation, op0, op1, ...)``, its operands possibly given as one list or tuple,
    or torch's sublist form (:func:`sublist_equation`).  The one call-form parser;
    :func:`einc.einsum`'s eager path inlines its string branch."""
    if args and isinstance(args[0], str):
        operands = args[1:]
        if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
            operands = operands[0]
        return args[0], operands
    return sublist_equation(args)


def _sublist_term(sub, what: str) -> str:
    if isinstance(sub, (str, bytes)) or not hasattr(sub, "__iter__") or getattr(sub, "ndim", 1) != 1:
        raise OperandTypeError(f"einsum(): the subscripts of {what} must be a list of ints and Ellipsis, "
                               f"got {type(sub).__name__}")
    out = ""
    for s in sub:
        if s is Ellipsis:
            out += ELLIPSIS
        elif s.__class__ is int and 0 <= s < len(_SUBLIST_LETTERS):
            out += _SUBLIST_LETTERS[s]
        else:
            out += _sublist_letter(s, what)
    return out


def _sublist_letter(s, what: str) -> str:
    try:
        i = operator.index(s)       # numpy integers, 0-d integer arrays; True and False, as torch takes them
    except TypeError:
        # numpy's and torch's bools, which torch takes as 0 and 1 too (by name: no torch here)
        i = int(bool(s)) if str(getattr(s, "dtype", "")) in ("bool", "torch.bool") and getattr(s, "ndim", 0) == 0 \
            else None
    if i is None:
        raise OperandTypeError(f"einsum(): subscript {s!r} in the subscript list of {what} is not an int "
                               "or Ellipsis")
    if i < 0:
        raise ArgumentError(f"einsum(): subscript in subscript list is not within the valid range [0, 52): "
                            f"{i} in the list of {what} is negative (einc takes any int >= 0)")
    if i >= len(_SUBLIST_LETTERS) and i >= len(_alphabet(True)):
        raise ArgumentError(f"einsum(): subscript in subscript list is not within the valid range [0, 52): "
                            f"{i} in the list of {what} is beyond the {len(_alphabet(True))} letters einc has")
    return _SUBLIST_LETTERS[i] if i < len(_SUBLIST_LETTERS) else letter(i)


def _build(text, inputs, input_positions, output, output_positions) -> Equation:
    seen = {label for labels in inputs for label in labels}
    has_ellipsis = ELLIPSIS in seen
    explicit = output is not None
    if explicit:
        for i, label in enumerate(output):
            if label in output[:i]:
                raise _err(EquationError, f"output subscript {label} appears more than once in the output",
                           text, output_positions[i],
                           f"Output character '{label}' appeared more than once in the output")
        for label, pos in zip(output, output_positions):
            if label != ELLIPSIS and label not in seen:
                raise _err(EquationError, f"output subscript {label} does not appear in the equation for any "
                           "input operand", text, pos, f"Output character '{label}' did not appear in the input")
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


# ---------------------------------------------------------------- opt_einsum's interleaved form

def _sublists(args) -> list:
    """The sublists of the interleaved form ``(x0, sub0, x1, sub1, ..., [output])``, the
    output's last where it is given."""
    return [args[k] for k in range(1, len(args), 2)] + ([args[-1]] if len(args) % 2 else [])


def _ranks(subs) -> dict:
    """Each label's place among all of ``subs``' labels sorted, as opt_einsum letters them
    (``TypeError`` where they do not sort together)."""
    return {s: k for k, s in enumerate(sorted({s for sub in subs for s in sub if s is not Ellipsis}))}


def interleaved_text(args, fallback: str) -> str:
    """The equation opt_einsum makes of the interleaved form: its labels sorted, lettered
    ``a``, ``b``, ... in that order (``fallback``, einc's own spelling, where they cannot
    be sorted)."""
    subs = _sublists(args)
    try:
        rank = _ranks(subs)
    except TypeError:
        return fallback
    terms = ["".join("..." if s is Ellipsis else opt_einsum.get_symbol(rank[s]) for s in sub) for sub in subs]
    operands = len(args) // 2
    return ",".join(terms[:operands]) + ("->" + terms[operands] if len(args) % 2 else "")


def interleaved_labels(args):
    """The interleaved form with its labels as ints: opt_einsum takes any hashable,
    sortable labels (``["x", "y"]``, tuples, negative ints, ints of any size) and letters
    them in sorted order; ints from 0 to below :data:`~einc.planner.equation.SUBLIST_REACH`
    (and ``Ellipsis``) stay as they are, as torch's sublists take them.  Past 26 labels
    with no output, the output opt_einsum implies is made explicit: the labels its letters
    would order otherwise than torch's sublists do."""
    if not args or isinstance(args[0], str):
        return args
    subs = _sublists(args)
    try:
        labels = {s for sub in subs for s in sub if s is not Ellipsis}
    except TypeError:           # not iterable, or unhashable: the sublist checks say so
        return args
    small = all(isinstance(s, numbers.Integral) and not isinstance(s, bool) and 0 <= s < SUBLIST_REACH for s in labels)
    implied = len(args) % 2 == 0 and len(labels) > 26
    if small and not implied:
        return args
    try:
        number = _ranks(subs)
    except TypeError:
        raise OperandTypeError(f"contract(): the labels of the interleaved form must sort together (opt_einsum "
                               f"letters them in sorted order), got {sorted(map(repr, labels))}") from None
    out = list(args)
    if implied:
        # opt_einsum implies the output in the order of its letters' code points, get_symbol's
        # 27th to 52nd ('A'-'Z') before its first 26: past 26 labels not their sorted order
        counts = collections.Counter(s for sub in subs for s in sub)
        once = [s for s, n in counts.items() if n == 1 and s is not Ellipsis]
        out.append([Ellipsis] * (Ellipsis in counts) + sorted(once, key=lambda s: opt_einsum.get_symbol(number[s])))
    if small:
        return tuple(out)
    for k in range(1, len(out), 2):
        out[k] = [s if s is Ellipsis else number[s] for s in out[k]]
    if len(out) % 2:
        out[-1] = [s if s is Ellipsis else number[s] for s in out[-1]]
    return tuple(out)
