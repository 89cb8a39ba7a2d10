"""The differential fuzzer's strategy and oracle, shared by tests/fuzz/test_fuzz.py.

A :class:`Case` is what a user hands einc: an equation of 1-6 operands, written as a
string or in torch's sublist format (int labels from 0 to beyond 52), with an implicit
or explicit output, repeated indices, ``...`` with broadcasting, size-0 and (often)
size-1 dimensions, any dtype torch.einsum supports, and operands transposed, sliced
with a step, expanded to stride 0 or offset into their storage.  The oracle is
torch.einsum on float64 / complex128 / int64 copies.  :func:`named_case` writes a case
in named notation with composite axes (adjacent indices merged on the operands and on
the output, axes ``1``, keyword sizes), checked against torch.einsum on the split views.

Profiles: the default run draws a quick, fixed (derandomized) set of examples per
executor, so a commit is green or red every time; ``EINC_FUZZ_EXAMPLES=N`` scales every
executor's count from N (the long run before a release), and ``EINC_FUZZ_SEED=S``
draws a different fixed set.
"""

from __future__ import annotations

import math
import os
import random
import string
from dataclasses import dataclass

import opt_einsum
import torch
from hypothesis import HealthCheck, seed, settings
from hypothesis import strategies as st
from oracle import TOL

ELL = Ellipsis
LETTERS = string.ascii_letters              # what torch.einsum's strings take
RANKED = sorted(LETTERS)                    # 'A'..'Z', 'a'..'z': the order of sublist ints < 52

FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128]
INTS = [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool]
ALL_DTYPES = FLOATS + INTS
LAYOUTS = ["plain", "transposed", "sliced", "expanded", "offset", "permuted"]
_INT_LABELS = list(range(80)) + [100, 255, 1000, 5000]

_LONG = int(os.environ.get("EINC_FUZZ_EXAMPLES", "0") or 0)
_SEED = os.environ.get("EINC_FUZZ_SEED")


def profile(quick: int, share: float):
    """Hypothesis settings: ``quick`` examples by default, ``share`` of EINC_FUZZ_EXAMPLES
    in the long run; derandomized, or seeded with EINC_FUZZ_SEED (another fixed set)."""
    n = max(1, int(_LONG * share)) if _LONG else quick
    chosen = settings(max_examples=n, deadline=None, derandomize=_SEED is None, database=None,
                      suppress_health_check=list(HealthCheck))
    if _SEED is None:
        return chosen
    return lambda test: seed(int(_SEED))(chosen(test))


@dataclass
class Case:
    terms: list             # per operand: label ids (ints into ``ints``/``letters``) and ELL
    output: list | None     # None: implicit
    shapes: list
    dtype: torch.dtype
    ints: list              # sublist int of each label
    letters: list           # string letter of each label
    sublist: bool           # the calling convention
    layouts: list
    sizes: list             # size of each label
    ell_sizes: list         # sizes of the (widest) ellipsis
    symbols: list | None = None     # opt_einsum.get_symbol symbols the string convention writes instead of letters,
                                    # in the letters' sort order (an implicit output sorts alike)

    def _text(self, names) -> str:
        def term(t):
            return "".join("..." if x is ELL else names[x] for x in t)
        text = ",".join(term(t) for t in self.terms)
        return text if self.output is None else text + "->" + term(self.output)

    @property
    def equation(self) -> str:
        """What the string convention passes (also the repr in failures)."""
        if self.sublist:
            return "sublist " + repr([[("..." if x is ELL else self.ints[x]) for x in t] for t in self.terms]) + (
                "" if self.output is None else " -> " + repr([("..." if x is ELL else self.ints[x])
                                                              for x in self.output]))
        return self._text(self.symbols or self.letters)

    @property
    def oracle_equation(self) -> str:
        """An equation torch.einsum takes with the same meaning: sublist ints ranked into
        letters in the same order (so an implicit output sorts the same way)."""
        if not self.sublist:
            return self._text(self.letters)
        rank = {i: RANKED[r] for r, i in enumerate(sorted(self.ints))}
        return self._text([rank[i] for i in self.ints])

    def args(self, operands) -> tuple:
        """einc.einsum's positional arguments for ``operands`` in this calling convention."""
        if not self.sublist:
            return (self._text(self.symbols or self.letters), *operands)
        out = []
        for op, t in zip(operands, self.terms):
            out += [op, [x if x is ELL else self.ints[x] for x in t]]
        if self.output is not None:
            out.append([x if x is ELL else self.ints[x] for x in self.output])
        return tuple(out)

    def summed_extent(self) -> int:
        """A bound on how many products are summed into one output element, times the
        largest magnitude of a product (operands are below 1, complex ones below 1.5)."""
        used = {x for t in self.terms for x in t if x is not ELL}
        if self.output is not None:
            kept = set(self.output)
        else:
            counts = [x for t in self.terms for x in t if x is not ELL]
            kept = {x for x in used if counts.count(x) == 1} | {ELL}
        extent = math.prod(max(1, self.sizes[x]) for x in used - kept)
        if ELL not in kept:
            extent *= math.prod(self.ell_sizes)
        return extent * (2 ** len(self.terms) if self.dtype.is_complex else 1)


def cases(dtypes=ALL_DTYPES, max_operands=6, sublist=None, layouts=LAYOUTS):
    """Cases drawn from a seed with explicit weights (hypothesis's own choices favour empty
    and minimal values, which starves the shapes that matter: a 2-D operand with one
    size-1 summed index, an implicit sublist output with labels on both sides of 26)."""
    return st.integers(0, 2**32 - 1).map(
        lambda seed: make_case(random.Random(seed), dtypes, max_operands, sublist, layouts))


def make_case(rng: random.Random, dtypes=ALL_DTYPES, max_operands=6, sublist=None, layouts=LAYOUTS) -> Case:
    n = min(rng.choice([1, 1, 1, 2, 2, 2, 3, 3, 4, 5, 6]), max_operands)
    k = rng.choice([1, 2, 2, 3, 3, 4, 5, 6])
    ints = rng.sample(_INT_LABELS, k)
    letters = rng.sample(LETTERS, k)
    sizes = [rng.choice([0, 1, 1, 1, 1, 2, 2, 3, 3, 4]) for _ in range(k)]
    if 0 in sizes and rng.random() < 0.6:      # keep size 0 present, not dominant
        sizes = [s if s else 1 for s in sizes]
    width = rng.choice([0, 0, 1, 2])
    ell_sizes = [rng.choice([1, 2, 3]) for _ in range(width)]
    terms, shapes = [], []
    for _ in range(n):
        labels = [rng.randrange(k) for _ in range(rng.choice([0, 1, 2, 2, 2, 3, 3, 4]))]
        ones = {x for x in set(labels) if rng.random() < 0.15}       # broadcast this label
        shape = [1 if x in ones else sizes[x] for x in labels]
        term = list(labels)
        if width and rng.random() < 0.35:
            m = rng.randint(0, width)
            pos = rng.randint(0, len(labels))
            ell = [rng.choice([1, s]) for s in ell_sizes[width - m:]]
            term = term[:pos] + [ELL] + term[pos:]
            shape = shape[:pos] + ell + shape[pos:]
        terms.append(term)
        shapes.append(tuple(shape))
    output = None
    if rng.random() < 0.5:
        used = sorted({x for t in terms for x in t if x is not ELL})
        kept = rng.choice([rng.randint(0, len(used)), len(used) - 1, len(used)])   # any, all but one, all
        output = rng.sample(used, max(0, kept))
        if any(ELL in t for t in terms) and rng.random() < 0.6:
            output.insert(rng.randint(0, len(output)), ELL)
    dtype = rng.choice(dtypes)
    conv = rng.random() < 0.5 if sublist is None else sublist
    lay = [rng.choice(layouts) for _ in range(n)]
    symbols = None
    if not conv and rng.random() < 0.25:        # drawn last: the cases above stay as they were
        drawn = [opt_einsum.get_symbol(i) for i in sorted(rng.sample(range(52, 6000), k))]
        symbols = [""] * k
        for r, x in enumerate(sorted(range(k), key=lambda x: letters[x])):
            symbols[x] = drawn[r]
    return Case(terms, output, shapes, dtype, ints, letters, conv, lay, sizes, ell_sizes, symbols)


# ----------------------------------------------------------------- broadcast pairs

BROADCASTS = [f"{side}/{role}" for side in ("left", "right") for role in ("batch", "summed")]


def broadcast_cases(dtypes=ALL_DTYPES, layouts=LAYOUTS):
    """Two-operand cases whose shared labels broadcast: a size-1 dimension against a larger
    one, held by the left operand, the right one or each (one label each way, as pykeen's
    NTN ``bcda,bca->bcd``), in the output (a batch index) or summed, beside shared labels
    that do not broadcast and each operand's own (sizes 2-5, so that the broadcasts are
    real; :func:`broadcasts` names what a case holds)."""
    return st.integers(0, 2**32 - 1).map(lambda seed: make_broadcast_case(random.Random(seed), dtypes, layouts))


def make_broadcast_case(rng: random.Random, dtypes=ALL_DTYPES, layouts=LAYOUTS) -> Case:
    sides = rng.choice([["left"], ["right"], ["left", "right"]])
    k = len(sides) + rng.randint(1, 5)
    sizes = [rng.randint(2, 5) for _ in range(k)]
    roles = [rng.choice(["shared", "shared", "left", "right"]) for _ in range(k - len(sides))]
    kept = [rng.random() < 0.5 for _ in range(k)]
    if not any(kept) and rng.random() < 0.7:
        kept[rng.randrange(k)] = True
    terms, shapes = [[], []], [[], []]
    for x in range(k):
        side = sides[x] if x < len(sides) else None
        for op, name in enumerate(("left", "right")):
            if side or roles[x - len(sides)] in ("shared", name):
                terms[op].append(x)
                shapes[op].append(1 if side == name else sizes[x])
    for t, sh in zip(terms, shapes):
        order = rng.sample(range(len(t)), len(t))
        t[:], sh[:] = [t[i] for i in order], [sh[i] for i in order]
    output = [x for x in range(k) if kept[x]]
    rng.shuffle(output)
    ints, letters = rng.sample(_INT_LABELS, k), rng.sample(LETTERS, k)
    lay = [rng.choice(layouts) for _ in range(2)]
    return Case(terms, output, [tuple(sh) for sh in shapes], rng.choice(dtypes), ints, letters, rng.random() < 0.5,
                lay, sizes, [])


def looped_cases(dtypes=ALL_DTYPES, layouts=LAYOUTS):
    """Cases whose output's first label is the first of one operand and absent from the
    other (the step the torch executor may run as one product per value of it:
    runtime/torch_executor/looped.py), that label of size 2-4, the others of 0-4 (0 seldom);
    a tenth of the other labels' dimensions drawn as 1 (broadcast where another operand's is
    larger); a third operand now and then, so that the step may come before another; either
    calling convention."""
    return st.integers(0, 2**32 - 1).map(lambda seed: make_looped_case(random.Random(seed), dtypes, layouts))


def make_looped_case(rng: random.Random, dtypes=ALL_DTYPES, layouts=LAYOUTS) -> Case:
    k = rng.randint(2, 6)
    sizes = [rng.randint(2, 4)] + [rng.choice([0, 1, 2, 2, 3, 3, 4, 4, 4]) for _ in range(k - 1)]
    if 0 in sizes and rng.random() < 0.7:       # size 0 present, seldom
        sizes = [s if s else 2 for s in sizes]
    rest = list(range(1, k))
    role = {x: rng.choice(["shared", "shared", "own", "other"]) for x in rest}
    shared = [x for x in rest if role[x] == "shared"]
    own, other = [x for x in rest if role[x] != "other"], [x for x in rest if role[x] != "own"]
    terms = [[0] + rng.sample(own, len(own)), rng.sample(other, len(other))]
    if rng.random() < 0.5:
        terms.reverse()          # the looped label in the right operand
    if rng.random() < 0.3:
        terms.append(rng.sample(rest, rng.randint(1, min(2, len(rest)))))
    # most shared labels summed (a matrix product), the operands' own kept, now and then summed alone
    kept = [x for x in rest if rng.random() < (0.25 if role[x] == "shared" else 0.85)]
    if shared and all(x in kept for x in shared):
        kept.remove(rng.choice(shared))
    output = [0] + rng.sample(kept, len(kept))
    shapes = [tuple(1 if x and rng.random() < 0.1 else sizes[x] for x in t) for t in terms]
    ints, letters = rng.sample(_INT_LABELS, k), rng.sample(LETTERS, k)
    lay = [rng.choice(layouts) for _ in terms]
    return Case(terms, output, shapes, rng.choice(dtypes), ints, letters, rng.random() < 0.5, lay, sizes, [])


def broadcasts(case: Case) -> set:
    """The broadcasts of a two-operand case: ``side/role`` for each label of size 1 in one
    operand and larger in the other (``side``: the operand holding the 1; ``role``:
    ``batch`` where the output keeps the label, else ``summed``)."""
    found = set()
    for op, side in enumerate(("left", "right")):
        other = dict(zip(case.terms[1 - op], case.shapes[1 - op]))
        for x, n in zip(case.terms[op], case.shapes[op]):
            if n == 1 and other.get(x, 1) > 1:
                found.add(f"{side}/{'batch' if x in (case.output or ()) else 'summed'}")
    return found


# ----------------------------------------------------------------- operands

def values(case: Case, seed: int):
    """Contiguous operands of ``case``: floats in [-1, 1), ints in [-2, 2] ([0, 2] unsigned)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for shape in case.shapes:
        if case.dtype.is_complex:
            out.append(torch.complex(torch.rand(shape, generator=g, dtype=torch.float64) * 2 - 1,
                                     torch.rand(shape, generator=g, dtype=torch.float64) * 2 - 1).to(case.dtype))
        elif case.dtype.is_floating_point:
            out.append((torch.rand(shape, generator=g, dtype=torch.float64) * 2 - 1).to(case.dtype))
        elif case.dtype == torch.bool:
            out.append(torch.randint(0, 2, shape, generator=g).bool())
        else:
            low = 0 if case.dtype == torch.uint8 else -2
            out.append(torch.randint(low, 3, shape, generator=g).to(case.dtype))
    return out


def lay_out(t: torch.Tensor, layout: str) -> torch.Tensor:
    """The same values as ``t`` in another memory layout (a view of fresh storage)."""
    if t.dim() == 0 or layout == "plain":
        return t.clone()
    if layout == "transposed":
        rev = tuple(reversed(range(t.dim())))
        return t.permute(rev).contiguous().permute(rev)
    if layout == "permuted":        # a rotation of the dimensions, e.g. channels-last
        p = tuple(range(1, t.dim())) + (0,)
        inverse = tuple(p.index(d) for d in range(t.dim()))
        return t.permute(p).contiguous().permute(inverse)
    if layout == "sliced":
        big = torch.zeros([2 * s + 1 for s in t.shape], dtype=t.dtype, device=t.device)
        view = big[tuple(slice(1, None, 2) for _ in t.shape)]
        view.copy_(t)
        return view
    if layout == "offset":
        flat = torch.zeros(t.numel() + 5, dtype=t.dtype, device=t.device)
        view = flat[5:].view(t.shape)
        view.copy_(t)
        return view
    # expanded: size-1 dimensions get stride 0, as torch's expand gives them
    return t.clone().as_strided(t.shape, [0 if s == 1 else st_ for s, st_ in zip(t.shape, t.contiguous().stride())])


def operands(case: Case, seed: int, device="cpu"):
    return [lay_out(t.to(device), layout) for t, layout in zip(values(case, seed), case.layouts)]


# ----------------------------------------------------------------- oracle

def trips_on_int64_promotion(error: Exception) -> bool:
    """Whether torch.einsum raised because it promoted a summed integer operand to int64
    and then multiplied it with the other, unpromoted one ("expected scalar type ...",
    or "expected m1 and m2 to have the same dtype" from ``mm``): einc contracts in the
    wider dtype instead, and answers."""
    return "expected scalar type" in str(error) or "to have the same dtype" in str(error)


def upcast(x: torch.Tensor) -> torch.Tensor:
    if x.dtype.is_complex:
        return x.to(torch.complex128)
    if x.dtype.is_floating_point:
        return x.to(torch.float64)
    return x.to(torch.int64)


def check_result(case: Case, out: torch.Tensor, ops, expected_dtype=None):
    """``out`` against the oracle: shape, dtype (torch.einsum's), values, a fresh
    contiguous tensor that shares no memory with an operand."""
    assert out.is_contiguous() and out.device == ops[0].device
    if out.numel():
        assert all(out.untyped_storage().data_ptr() != o.untyped_storage().data_ptr() for o in ops)
    out, ops = out.cpu(), [o.cpu() for o in ops]
    ref = torch.einsum(case.oracle_equation, *[upcast(o) for o in ops])
    assert tuple(out.shape) == tuple(ref.shape), (out.shape, ref.shape)
    if expected_dtype is not None:
        assert out.dtype == expected_dtype, (out.dtype, expected_dtype)
    if out.dtype == torch.bool:
        assert torch.equal(out, ref != 0)
    elif not (out.dtype.is_floating_point or out.dtype.is_complex):
        assert torch.equal(out, ref.to(out.dtype)), (out, ref)   # integer results wrap like torch's
    else:
        rtol, atol = TOL[out.dtype if out.dtype in TOL else case.dtype]
        torch.testing.assert_close(out.to(ref.dtype), ref, rtol=rtol * 4, atol=atol * case.summed_extent() * 4,
                                   equal_nan=True)


# ----------------------------------------------------------------- named and composite axes

@dataclass
class NamedCase:
    """A :class:`Case` written in named notation: adjacent indices of an operand merged into
    composite axes ``(a3 b)`` (the operand holds them as one dimension), adjacent output
    indices merged likewise, axes ``1`` inserted; keyword sizes where no plain axis gives one."""

    case: Case
    text: str
    sizes: dict
    merged: list            # per operand: its shape in named notation
    out_groups: list        # per output axis: the number of indices merged (0: '1', -1: '...')

    def operands(self, seed: int, device="cpu"):
        vals = values(self.case, seed)
        return [lay_out(v.reshape(m).to(device), lay) for v, m, lay in zip(vals, self.merged, self.case.layouts)]

    def split(self, ops):
        """The operands as the case's own equation sees them (views of the merged operands)."""
        return [o.reshape(s) for o, s in zip(ops, self.case.shapes)]

    def merge_output(self, result: torch.Tensor) -> torch.Tensor:
        fixed = sum(g for g in self.out_groups if g > 0)
        shape, d = [], 0
        for g in self.out_groups:
            if g < 0:
                m = result.dim() - fixed
                shape += list(result.shape[d:d + m])
                d += m
            else:
                shape.append(math.prod(result.shape[d:d + g]))
                d += g
        return result.reshape(shape)


def named_case(case: Case, rng: random.Random) -> NamedCase:
    """``case`` in named notation (string convention; the output made explicit)."""
    from einc.planner.equation import parse
    names = [f"{case.letters[x]}{x}" if rng.random() < 0.5 else case.letters[x] for x in range(len(case.letters))]
    by_letter = {c: x for x, c in enumerate(case.letters)}
    output = case.output
    if output is None:
        output = [ELL if c == "..." else by_letter[c] for c in parse(case._text(case.letters)).output]
    terms, merged, plain_full = [], [], set()
    for t, shape in zip(case.terms, case.shapes):
        ell = len(shape) - sum(x is not ELL for x in t)
        axes, dims, d = [], [], 0          # axes: list of label groups / ELL; dims: merged sizes
        for x in t:
            if x is ELL:
                axes.append(ELL)
                dims += list(shape[d:d + ell])
                d += ell
                continue
            full = shape[d] == case.sizes[x]
            last = axes[-1] if axes and axes[-1] is not ELL else None
            if last is not None and last[1] and full and x not in last[0] and len(last[0]) < 3 and \
                    rng.random() < 0.5:
                last[0].append(x)
                dims[-1] *= shape[d]
            else:
                axes.append(([x], full))
                dims.append(shape[d])
            d += 1
        for a in axes:
            if a is not ELL and len(a[0]) == 1 and a[1]:
                plain_full.add(a[0][0])
        if rng.random() < 0.15:         # an axis '1'
            at = rng.randint(0, len(axes))
            axes.insert(at, "1")
            dims.insert(sum(1 if a is not ELL else ell for a in axes[:at]), 1)
        terms.append(axes)
        merged.append(tuple(dims))
    out_axes, out_groups = [], []
    for x in output:
        if x is ELL:
            out_axes.append(ELL)
            out_groups.append(-1)
        elif out_axes and out_axes[-1] is not ELL and out_axes[-1] != "1" and len(out_axes[-1]) < 3 and \
                rng.random() < 0.5:
            out_axes[-1].append(x)
            out_groups[-1] += 1
        else:
            out_axes.append([x])
            out_groups.append(1)
    if rng.random() < 0.15:
        at = rng.randint(0, len(out_axes))
        out_axes.insert(at, "1")
        out_groups.insert(at, 0)

    def axis_text(a, where_out=False):
        if a is ELL:
            return "..."
        if a == "1":
            return "1"
        group = a if where_out else a[0]
        return names[group[0]] if len(group) == 1 else "(" + " ".join(names[x] for x in group) + ")"
    text = ", ".join(" ".join(axis_text(a) for a in axes) for axes in terms) + " -> " + \
        " ".join(axis_text(a, True) for a in out_axes)
    if "(" not in text:         # one axis in parentheses: named notation, whatever torch would read
        text = _parenthesize(text)
    composite = {x for axes in terms for a in axes if a not in (ELL, "1") and len(a[0]) > 1 for x in a[0]}
    sizes = {names[x]: case.sizes[x] for x in composite if x not in plain_full or case.sizes[x] == 0}
    return NamedCase(case, text, sizes, merged, out_groups)


def _parenthesize(text: str) -> str:
    """``text`` with its first axis name in parentheses, or its first axis ``1`` written
    ``()``: named notation.  (With neither, torch's reading has the same meaning.)"""
    import re
    m = re.search(r"(?<![\w(])([A-Za-z]\w*)", text) or re.search(r"(?<!\w)(1)(?!\w)", text)
    if m is None:
        return text
    inner = "" if m.group(1) == "1" else m.group(1)
    return text[:m.start()] + "(" + inner + ")" + text[m.end():]
