"""Named and composite axes: ``"b n (h d), h d e -> b n (h e)"``.

The rule: **an equation that einc reads in torch's notation (each letter one index,
spaces ignored) means what it means there; an equation that reading rejects is read in
named notation when it writes a parenthesis or a space between two axis names.**  So no
equation torch.einsum accepts changes meaning (``"ab cd"`` stays
the four indices a, b, c, d), and where both readings are possible they agree whenever
every name is one letter (``"a b, b c -> a c"`` is ``ab,bc->ac`` either way).  einc's
letters beyond a-z and A-Z are one index each only where no name is longer than one
character or the text has no mark (:func:`~einc.planner.equation.parse` rejects
``"éa ñb -> ñb"``, which torch reads in no way, for named notation to read).

Named notation, as einops writes it: axis names are identifiers separated by whitespace;
``(h d)`` is one dimension of size ``h * d`` (a composite axis, on inputs and on the
output); ``1`` (or ``()``) is a dimension of size 1 that is no index; ``...`` as in
torch; the output after ``->`` is required.  Sizes a composite axis cannot infer are
passed by keyword (``einc.einsum(eq, x, w, h=8)``).

It is resolved into an ordinary einc equation over one letter per name (single-letter
names keep their letter where they can, a longer name takes its first letter where that
is free): an input's composite axis is split into its parts by strides (``Tensor.view``:
splitting one dimension never copies), ``1`` is dropped from the view, the planner sees
the parts as ordinary indices, and the output's composite axes are merged by a
``reshape`` of einc's fresh contiguous result, which is a view of it (under ``layout="any"``
a view where the result's strides merge, else a contiguous copy).

Pure Python (no torch import): this module parses, resolves and describes; the doors'
glue (the operands' views, the call of the door on the resolved equation, the output's
reshape) is :mod:`einc.named`.
"""

from __future__ import annotations

import functools
import operator
import unicodedata
from dataclasses import dataclass

from .. import config
from ..errors import ArgumentError, EincError, EquationError, OperandCountError, ShapeError, SizeKeywordError, caret
from .equation import _LETTERS, ELLIPSIS, NAMED_MARK, letter, parse, term_spans


def _is_ellipsis(axis) -> bool:
    """Whether an axis (a tuple of names) is :data:`ELLIPSIS`, the one axis that is a str.
    Asked by type, not by ``==``: dynamo (torch 2.11's) cannot compare a tuple with a str
    while it traces :func:`resolve`."""
    return isinstance(axis, str)


def _has_ellipsis(axes) -> bool:
    return any(_is_ellipsis(axis) for axis in axes)


@functools.lru_cache(maxsize=1024)
def is_named(text) -> bool:
    """Whether ``text`` is in named notation (the rule in the module's docstring)."""
    if text.__class__ is not str or not NAMED_MARK.search(text):
        return False
    try:
        parse(text)
    except EincError:
        return True
    return False


# ----------------------------------------------------------------------- parse

@dataclass(frozen=True)
class Named:
    """A named equation.  An axis is a tuple of names (one name: a plain axis; two or
    more: a composite axis; none: ``1``) or :data:`ELLIPSIS`.  ``equation`` is the
    resolved ordinary equation (one letter per name); ``letters`` maps names to letters."""

    text: str
    inputs: tuple
    output: tuple
    input_positions: tuple      # per operand, per axis: (position of the axis, positions of its names)
    output_positions: tuple
    letters: tuple              # ((name, letter), ...) in order of first appearance
    equation: str
    merges: bool                # whether the output has a composite axis or a '1'

    @property
    def names(self) -> dict:
        return dict(self.letters)

def _where(named: Named, k, a=None, name=None) -> str:
    """The text with a caret under operand ``k`` (``"output"``), its axis ``a``, or one
    name of that axis (a function, not a method: dynamo traces it in error paths)."""
    axes, positions = (named.output, named.output_positions) if k == "output" else \
        (named.inputs[k], named.input_positions[k])
    if a is None:
        return caret(named.text, positions[0][0] if positions else None)
    at, parts = positions[a]
    if name is not None and not _is_ellipsis(axes[a]) and name in axes[a]:
        at = parts[axes[a].index(name)]
    return caret(named.text, at)


def _err(cls, msg, text, position):
    return cls(f"einsum(): {msg}\n{caret(text, position)}")


def _term(text: str, start: int, stop: int, what: str):
    """The axes of ``text[start:stop]`` and their positions."""
    axes, positions = [], []
    group = None
    i = start
    while i < stop:
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch == "(":
            if group is not None:
                raise _err(EquationError, f"nested parenthesis in {what}: a composite axis is a flat list of "
                           "names, e.g. (h d)", text, i)
            group, names_at, opened = [], [], i
            i += 1
        elif ch == ")":
            if group is None:
                raise _err(EquationError, f"')' in {what} closes no '('", text, i)
            axes.append(tuple(group))
            positions.append((opened, tuple(names_at)))
            group = None
            i += 1
        elif text.startswith("...", i):
            if group is not None:
                raise _err(EquationError, f"an ellipsis '...' inside parentheses in {what}: einc splits and "
                           "merges named axes only", text, i)
            if _has_ellipsis(axes):
                raise _err(EquationError, f"a second ellipsis '...' in {what}; each term takes at most one", text, i)
            axes.append(ELLIPSIS)
            positions.append((i, ()))
            i += 3
        elif ch.isalnum() or ch == "_":
            j = i
            while j < stop and (text[j].isalnum() or text[j] == "_"):
                j += 1
            word = text[i:j]
            if word != "1" and not word.isidentifier():
                raise _err(EquationError, f"{word!r} in {what} is not an axis name: a name is an identifier "
                           "(letters, digits, '_', not starting with a digit) and '1' is an axis of size 1",
                           text, i)
            if group is not None:
                if word in group:
                    raise _err(EquationError, f"{word} appears twice in one composite axis of {what}", text, i)
                if word != "1":
                    group.append(word)
                    names_at.append(i)
            else:
                axes.append(() if word == "1" else (word,))
                positions.append((i, () if word == "1" else (i,)))
            i = j
        else:
            raise _err(EquationError, f"{ch!r} in {what} is not part of named notation (axis names separated "
                       "by spaces, '(' ')', '1', '...', ',' and one '->')", text, i)
    if group is not None:
        raise _err(EquationError, f"'(' in {what} is never closed", text, opened)
    return tuple(axes), tuple(positions)


@functools.lru_cache(maxsize=1024)
def structure(text: str) -> Named:
    """Parse a named equation, or an equation in torch's notation as named (each label one
    name: the form a call with keyword sizes takes)."""
    if not is_named(text):
        eq = parse(text)        # torch's reading: its labels are the names
        inputs = tuple(tuple(ELLIPSIS if x == ELLIPSIS else (x,) for x in t) for t in eq.inputs)
        in_pos = tuple(tuple((p, () if x == ELLIPSIS else (p,)) for x, p in zip(t, ps))
                       for t, ps in zip(eq.inputs, eq.input_positions))
        output = tuple(ELLIPSIS if x == ELLIPSIS else (x,) for x in eq.output)
        out_pos = tuple((p, () if x == ELLIPSIS else (p,)) for x, p in zip(eq.output, eq.output_positions)) \
            if eq.explicit else ()
        return _finish(text, inputs, in_pos, output, out_pos)
    arrow = text.find("->")
    if arrow < 0:
        raise _err(EquationError, "named notation needs '->' and the output's axes (the output of a named "
                   "equation is never implied)", text, len(text))
    if text.find("->", arrow + 2) >= 0 or text.find(",", arrow) >= 0:
        bad = min(i for i in (text.find("->", arrow + 2), text.find(",", arrow)) if i >= 0)
        raise _err(EquationError, "the output (after '->') is one term, and there is one '->'", text, bad)
    inputs, in_pos = [], []
    for start, stop in term_spans(text, 0, arrow):
        axes, positions = _term(text, start, stop, f"operand {len(inputs)}")
        inputs.append(axes)
        in_pos.append(positions)
    output, out_pos = _term(text, arrow + 2, len(text), "output")
    seen = {n for axes in inputs for axis in axes if not _is_ellipsis(axis) for n in axis}
    used = set()
    for a, axis in enumerate(output):
        if _is_ellipsis(axis):
            continue
        for n, at in zip(axis, out_pos[a][1]):
            if n in used:
                raise _err(EquationError, f"output axis {n} appears more than once in the output", text, at)
            if n not in seen:
                raise _err(EquationError, f"output axis {n} does not appear in the equation for any input "
                           "operand", text, at)
            used.add(n)
    if any(_is_ellipsis(axis) for axis in output) and not any(_has_ellipsis(axes) for axes in inputs):
        raise _err(EquationError, "the output has '...' but no operand has", text, arrow + 2)
    return _finish(text, tuple(inputs), tuple(in_pos), output, out_pos)


def _finish(text, inputs, in_pos, output, out_pos) -> Named:
    order = []
    for axes in (*inputs, output):
        for axis in axes:
            if not _is_ellipsis(axis):
                order += [n for n in axis if n not in order]
    chosen: dict[str, str] = {}
    taken: set[str] = set()
    for n in order:         # single letters keep theirs; then a longer name takes its first letter if free
        if len(n) == 1 and n.isalpha() and n not in taken:
            chosen[n] = n
            taken.add(n)
    for n in order:
        if n not in chosen and n[0] in _LETTERS and n[0] not in taken:
            chosen[n] = n[0]
            taken.add(n[0])
    free = (c for c in map(letter, range(len(order) + len(taken) + 1)) if c not in taken)
    for n in order:
        if n not in chosen:
            chosen[n] = next(free)

    def term(axes):
        return "".join(ELLIPSIS if _is_ellipsis(axis) else "".join(chosen[n] for n in axis) for axis in axes)
    equation = ",".join(term(axes) for axes in inputs) + "->" + term(output)
    merges = not all(_is_ellipsis(axis) or len(axis) == 1 for axis in output)
    return Named(text, inputs, output, in_pos, out_pos, tuple((n, chosen[n]) for n in order), equation, merges)


# ----------------------------------------------------------------------- sizes

def _fail(fail, cls, message: str):
    """The error to raise, after ``fail`` (if any) has seen it."""
    if fail is not None:
        fail(cls, message)
    return cls(message)


def is_boolean(value) -> bool:
    """True, False, a bool tensor or numpy bool: no size (operator.index takes them).  By
    type name: a symbolic size under torch.compile has no attribute to ask."""
    kind = type(value).__name__
    return isinstance(value, bool) or kind == "bool_" or (kind == "Tensor" and str(value.dtype) == "torch.bool")


def _size(name, value, fail=None):
    if value.__class__ is not int and type(value).__name__ != "SymInt":
        try:
            if is_boolean(value):
                raise TypeError
            value = operator.index(value)
        except TypeError:
            raise _fail(fail, ArgumentError, f"einsum(): the size {name}={value!r} must be an int") from None
    if value < 0:
        raise _fail(fail, ArgumentError, f"einsum(): the size {name}={value} cannot be negative")
    return value


# The doors' own keywords (einsum's, contract's, contract_expression's): never a size.
DOOR_KEYWORDS = frozenset({"optimize", "memory_limit", "select", "out", "backend", "dtype", "order", "casting",
                           "use_blas", "constants", "device", "shapes", "layout"})


def resolve(named: Named, shapes, sizes, fail=None) -> tuple:
    """Every name's size from the operands' shapes and the keyword ``sizes``, checked:
    ``(sizes by name, view shape of each operand or None where it is used as is)``.
    A plain axis of size 1 broadcasts, as in torch.  ``fail(error class, message)``, where
    given, sees each error first (under torch.compile it raises einc's error at trace time
    rather than dynamo's "observed exception")."""
    def bad(cls, message, where):
        return _fail(fail, cls, f"einsum(): {message}\n{where}")

    if len(shapes) != len(named.inputs):
        raise bad(OperandCountError, f"the equation names {len(named.inputs)} operands but {len(shapes)} were "
                  "given", caret(named.text, None))
    names = dict(named.letters)
    if any(key not in names for key in sizes):
        sizes = _as_written(named, sizes, bad)
    for key in sizes:
        if key not in names:
            raise bad(SizeKeywordError, f"unknown keyword {key}={sizes[key]!r}: {key} is neither a keyword of this "
                      f"function nor an axis of the equation (its axes: {', '.join(names) or 'none'})",
                      caret(named.text, None))
    known = {k: _size(k, v, fail) for k, v in sizes.items()}
    keyword = set(known)
    plain, composites = _axis_sizes(named, shapes, bad)
    _check_ellipses(named, shapes, bad)
    in_composite = {n for _, axis, _, _ in composites for n in axis}
    _agree_plain(named, plain, known, keyword, in_composite, bad)
    weak = {n: 1 for n in plain if n not in known}      # only broadcast dimensions: a composite may say more
    _solve_composites(named, composites, known, bad)
    for n, v in weak.items():
        known.setdefault(n, v)
    _check_composites(named, composites, known, bad)
    for n, seen in plain.items():
        for size, k, a in seen:
            if size != known[n] and size != 1:
                raise bad(ShapeError, f"axis {n} has two sizes: {known[n]} (from a composite axis) and {size} in "
                          f"operand {k}", _where(named, k, a, n))
    return known, _view_shapes(named, shapes, known)


def _as_written(named: Named, sizes, bad) -> dict:
    """``sizes`` keyed by the names as the equation writes them: Python passes a keyword
    in NFKC form (``ﬁ=3`` arrives as ``fi``, ``ℌ=3`` as ``H``), so a keyword that names no
    axis names the one axis whose NFKC form it is."""
    out = {}
    for key, value in sizes.items():
        written = _written(tuple(n for n, _ in named.letters), key)
        if len(written) > 1:
            raise bad(SizeKeywordError, f"the keyword {key}={value!r} names {' and '.join(written)}, which Python "
                      f"reads as one name ({key}: keywords arrive in NFKC form); rename one of them",
                      caret(named.text, None))
        out[written[0] if written else key] = value
    return out


def _written(names: tuple, key: str) -> tuple:
    """The ``names`` that the keyword ``key`` stands for: itself, else those whose NFKC form
    it is.  (Dynamo takes the answer as a constant: it does not trace unicodedata.)"""
    if key in names:
        return (key,)
    form = unicodedata.normalize("NFKC", key)
    return tuple(n for n in names if unicodedata.normalize("NFKC", n) == form)


_written._dynamo_marked_constant = True     # (torch.compiler.assume_constant_result's mark, without torch)


def _axis_sizes(named: Named, shapes, bad) -> tuple[dict, list]:
    """Each operand's axes against its shape: ``(plain, composites)``, the sizes seen of
    each plain axis ``{name: [(size, operand, axis)]}`` and the composite axes
    ``[(total, names, operand, axis)]``; ``bad`` makes the error to raise."""
    plain = {}          # name -> [(size, operand, axis)]
    composites = []     # (total, names, operand, axis)
    for k, (axes, shape) in enumerate(zip(named.inputs, shapes)):
        fixed = sum(not _is_ellipsis(axis) for axis in axes)
        ndim = len(shape)
        if ndim < fixed if _has_ellipsis(axes) else ndim != fixed:
            raise bad(ShapeError, f"operand {k} has {ndim} dimensions but the equation gives it "
                      f"{'at least ' if _has_ellipsis(axes) else ''}{fixed} axes", _where(named, k))
        d = 0
        for a, axis in enumerate(axes):
            if _is_ellipsis(axis):
                d += ndim - fixed
                continue
            size = shape[d]
            d += 1
            if len(axis) == 0:
                if size != 1:
                    raise bad(ShapeError, f"the axis '1' of operand {k} has size {size}; '1' is an axis of size 1",
                              _where(named, k, a))
            elif len(axis) == 1:
                plain.setdefault(axis[0], []).append((size, k, a))
            else:
                composites.append((size, axis, k, a))
    return plain, composites


def _check_ellipses(named: Named, shapes, bad) -> None:
    """The dimensions the ellipses cover broadcast together (right-aligned: equal, or 1),
    checked here so that the error names the operands' own shapes and the text as written."""
    seen, covers = {}, {}       # dimension counted from the right -> (size, operand); operand -> covered
    for k, (axes, shape) in enumerate(zip(named.inputs, shapes)):
        if not _has_ellipsis(axes):
            continue
        a = next(a for a, axis in enumerate(axes) if _is_ellipsis(axis))
        covers[k] = covered = tuple(shape[a:a + len(shape) - (len(axes) - 1)])
        for r, size in enumerate(reversed(covered)):
            old, j = seen.get(r, (1, None))
            if size != 1 and old != 1 and size != old:
                raise bad(ShapeError, f"the ellipsis '...' of operand {k} covers {covered}, which does not "
                          f"broadcast with the {covers[j]} of operand {j}: size {size} against {old} (sizes "
                          "must match or be 1, aligned from the right)", _where(named, k, a))
            if old == 1:
                seen[r] = (size, k)


def _agree_plain(named: Named, plain, known, keyword, in_composite, bad) -> None:
    """Check that the plain axes agree with each other and with a keyword; record their
    sizes in ``known``."""
    for n, seen in plain.items():       # plain axes agree with each other and with a keyword
        full = [s for s in seen if s[0] != 1]
        if n in keyword and not full and n not in in_composite and known[n] != 1:
            full = seen         # size 1 everywhere: it broadcasts against nothing, the keyword must match
        first, where = (known[n], "the keyword") if n in keyword else (full[0][0], f"operand {full[0][1]}") \
            if full else (None, None)
        for size, k, a in full:
            if size != first:
                raise bad(ShapeError, f"axis {n} has two sizes: {first} in {where} and {size} in operand {k}",
                          _where(named, k, a, n))
        if n not in known and full:
            known[n] = first


def _solve_composites(named: Named, composites, known, bad) -> None:
    """Give each unknown part of a composite its size where it is the one part unknown,
    until nothing changes (sizes recorded in ``known``)."""
    progress = True
    while progress:     # a composite with one unknown part gives it
        progress = False
        for total, axis, k, a in composites:
            unknown = [n for n in axis if n not in known]
            if len(unknown) != 1:
                continue
            part = functools.reduce(operator.mul, (known[n] for n in axis if n in known), 1)
            if part == 0:
                if total:       # total = 0 * x has no solution
                    given = " * ".join(f"{n}={known[n]}" for n in axis if n in known)
                    raise bad(ShapeError, f"({' '.join(axis)}) of operand {k} has size {total}, which {given} "
                              f"cannot make: a size 0 leaves no size for {unknown[0]}",
                              _where(named, k, a, unknown[0]))
                continue        # 0 = 0 * x says nothing of x
            if total % part != 0:
                given = " * ".join(f"{n}={known[n]}" for n in axis if n in known)
                raise bad(ShapeError, f"({' '.join(axis)}) of operand {k} has size {total}, which {given} does "
                          f"not divide: {total} / {part} leaves no whole size for {unknown[0]}",
                          _where(named, k, a, unknown[0]))
            known[unknown[0]] = total // part
            progress = True


def _check_composites(named: Named, composites, known, bad) -> None:
    """Every composite's parts known (a block that moves whole takes the size and 1s) and
    multiplying to its size; else the error that says what to pass."""
    for total, axis, k, a in composites:
        missing = [n for n in axis if n not in known]
        if missing and _moves_whole(named, axis, missing):
            # (b h) only ever as (b h), on every side: any split gives the same result; (total, 1, ...)
            part = functools.reduce(operator.mul, (known[n] for n in axis if n in known), 1)
            if part and total % part == 0:
                for i, n in enumerate(missing):
                    known[n] = total // part if i == 0 else 1
                missing = []
        if missing:
            taken = [n for n in missing if n in DOOR_KEYWORDS]
            if taken:
                raise bad(ShapeError, f"cannot split ({' '.join(axis)}) of operand {k} (size {total}): nothing "
                          f"gives the size of {taken[0]}, and it cannot be passed by keyword: {taken[0]}= is "
                          f"a keyword of einc's functions (einsum, contract, explain, contract_path, "
                          f"contract_expression); "
                          f"rename the axis", _where(named, k, a, taken[0]))
            which = f"{missing[0]}=..." if len(missing) == 1 else "all but one of them"
            regrouped = [g for g in named.output if not _is_ellipsis(g) and len(g) > 1 and set(g) & set(missing)
                         and g != axis]
            also = f" (the output groups them as ({' '.join(regrouped[0])}))" if regrouped else ""
            raise bad(ShapeError, f"cannot split ({' '.join(axis)}) of operand {k} (size {total}): nothing gives "
                      f"the size of {' and '.join(missing)}{also}; pass {which} by keyword, e.g. "
                      f"einc.einsum(equation, *operands, {missing[0]}=...)", _where(named, k, a, missing[0]))
        product = functools.reduce(operator.mul, (known[n] for n in axis), 1)
        if product != total:
            parts = " * ".join(f"{n}={known[n]}" for n in axis)
            raise bad(ShapeError, f"({' '.join(axis)}) of operand {k} has size {total}, but {parts} is {product}",
                      _where(named, k, a))


def _view_shapes(named: Named, shapes, known) -> tuple:
    """The view shape of each operand, its composites split (None where it is used as is)."""
    views = []
    for axes, shape in zip(named.inputs, shapes):
        if all(_is_ellipsis(axis) or len(axis) == 1 for axis in axes):
            views.append(None)
            continue
        fixed = sum(not _is_ellipsis(axis) for axis in axes)
        view, d = [], 0
        for axis in axes:
            if _is_ellipsis(axis):
                view += list(shape[d:d + len(shape) - fixed])
                d += len(shape) - fixed
                continue
            if len(axis) == 1:
                view.append(shape[d])
            else:
                view += [known[n] for n in axis]
            d += 1
        views.append(tuple(view))
    return tuple(views)


def _moves_whole(named: Named, axis: tuple, names) -> bool:
    """Whether ``names`` stand together inside the composite ``axis``, and every axis
    holding one of them, on the inputs and the output, is ``axis`` itself: then they are
    never separated, and any split of their block gives the same result.  (Not so in
    ``(a d b) -> d``: which elements share a ``d`` depends on how a and b split.)"""
    place = sorted(axis.index(n) for n in names)
    if place != list(range(place[0], place[0] + len(place))):
        return False
    for axes in (*named.inputs, named.output):
        for other in axes:
            if not _is_ellipsis(other) and not _same(other, axis) and any(n in other for n in names):
                return False
    return True


def _same(a: tuple, b: tuple) -> bool:
    """``a == b`` for two axes, name by name: torch 2.11's dynamo cannot compare two tuples
    while it traces :func:`resolve` (its ``!=`` polyfill raises NotImplementedError)."""
    return len(a) == len(b) and all(x == y for x, y in zip(a, b))


def output_shape(named: Named, result_shape):
    """The output's shape from the shape of the resolved equation's result (composite axes
    merged, ``1`` inserted), or None where they are the same."""
    if not named.merges:
        return None
    fixed = sum(len(axis) for axis in named.output if not _is_ellipsis(axis))
    shape, d = [], 0
    for axis in named.output:
        if _is_ellipsis(axis):
            m = len(result_shape) - fixed
            shape += list(result_shape[d:d + m])
            d += m
        else:
            shape.append(functools.reduce(operator.mul, result_shape[d:d + len(axis)], 1))
            d += len(axis)
    return tuple(shape)


def describe(named: Named, shapes, known, layout: str = "contiguous") -> str:
    """In plain words: how the names resolve (letters, sizes) and what each split and
    merge costs (nothing: a split is a view, a merge views einc's contiguous result; under
    ``layout`` ``"any"`` a merge is a view only where the result's strides merge, else a
    copy, as :func:`einc.named.merged` makes it; ``"torch"``: the result is torch's einsum's,
    for an operand that is not strided, which a sparse result has no reshape of)."""
    letters = named.names
    renamed = [f"{n}={c}" for n, c in named.letters if n != c]
    lines = [f"Named axes: {named.text}",
             f"  resolved equation: {named.equation}" + (f"  (letters: {', '.join(renamed)})" if renamed else ""),
             "  sizes: " + ", ".join(f"{n}={known[n]}" for n in letters if n in known)]
    for k, axes in enumerate(named.inputs):
        for axis in axes:
            if not _is_ellipsis(axis) and len(axis) > 1:
                lines.append(f"  operand {k}: ({' '.join(axis)}) split into " + " ".join(
                    f"{n}={known[n]}" for n in axis) + " by strides: a view, no copy")
            elif axis == ():
                lines.append(f"  operand {k}: its axis '1' dropped: a view, no copy")
    for axis in named.output:
        if not _is_ellipsis(axis) and len(axis) > 1:
            lines.append(f"  output: ({' '.join(axis)}) merged from " + " ".join(f"{n}={known[n]}" for n in axis)
                         + _MERGE.get(layout, _MERGE["contiguous"]))
        elif axis == ():
            lines.append("  output: an axis '1' inserted: a view, no copy")
    return "\n".join(lines)


_MERGE = {"contiguous": ": a view of einc's contiguous result, no copy",
          "any": (": a view of einc's result where its strides merge, else a contiguous copy (layout 'any': the "
                  "result is in the order the last step writes it)"),
          "torch": (": a reshape of torch's einsum's result (an operand is not strided: the call is torch's); "
                    "a sparse result has no reshape, and the call raises LayoutError")}


def for_cli(text: str, shapes, sizes: dict):
    """``(resolved equation, its operand shapes, the names' description)`` for ``einc dump``
    and ``einc explain`` (pure: no torch)."""
    named = structure(text)
    names = tuple(n for n, _ in named.letters)
    for key, value in sizes.items():
        if not _written(names, key):
            raise SizeKeywordError(f"--size {key}={value}: {key} is not an axis of the equation (its axes: "
                                   f"{', '.join(names) or 'none'})\n{caret(named.text, None)}")
    known, view_shapes = resolve(named, [tuple(s) for s in shapes], sizes)
    return named.equation, [tuple(s) if v is None else v for s, v in zip(shapes, view_shapes)], \
        describe(named, shapes, known, config.layout())
