"""Named and composite axes (einc/notation.py): ``"b n (h d), h d e -> b n (h e)"``.

The oracle is torch.einsum on the operands' manual views, in float64 / complex128.
"""

import contextlib
import itertools
import json
import random
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.fx
from oracle import assert_close
from torch.utils._python_dispatch import TorchDispatchMode

import einc
from einc import errors
from einc import named as named_axes
from einc.planner import notation

EQ = "b n (h d), h d e -> b n (h e)"
LETTERS = "bnhd,hde->bnhe"


def _oracle(x, w, h):
    b, n, hd = x.shape
    up = torch.complex128 if x.dtype.is_complex else torch.float64
    d = hd // h
    return torch.einsum(LETTERS, x.to(up).reshape(b, n, h, d), w.to(up)).reshape(b, n, h * w.shape[-1])


def _operands(b, n, h, d, e, dtype, layout, seed=0):
    g = torch.Generator().manual_seed(seed)

    def rand(*shape):
        t = torch.randn(*shape, generator=g, dtype=torch.float64)
        if dtype.is_complex:
            t = torch.complex(t, torch.randn(*shape, generator=g, dtype=torch.float64))
        return t.to(dtype)
    if layout == "contiguous":
        x = rand(b, n, h * d)
    elif layout == "strided":       # every other element of the last dimension, and n transposed in
        x = rand(n, b, 2 * h * d).transpose(0, 1)[:, :, ::2]
    elif layout == "expanded":      # stride 0 along b
        x = rand(1, n, h * d).expand(b, n, h * d)
    else:
        raise AssertionError(layout)
    w = rand(h, d, e)
    if layout == "strided":
        w = rand(h, e, d).transpose(1, 2)
    return x, w


DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.complex64]
SIZES = [(2, 3, 4, 5, 6), (0, 3, 4, 5, 6), (2, 3, 4, 0, 6), (1, 1, 1, 1, 1), (2, 1, 4, 1, 3)]


# ----------------------------------------------------------------------- the example

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "strided", "expanded"])
@pytest.mark.parametrize("sizes", SIZES, ids=lambda s: "x".join(map(str, s)))
def test_the_issue_example(dtype, layout, sizes):
    b, n, h, d, e = sizes
    x, w = _operands(b, n, h, d, e, dtype, layout)
    out = einc.einsum(EQ, x, w, h=h)
    expected = torch.einsum(LETTERS, x.reshape(b, n, h, d), w).reshape(b, n, h * e)
    assert out.shape == expected.shape == (b, n, h * e) and out.dtype == expected.dtype == dtype
    assert out.is_contiguous()
    assert_close(out, _oracle(x, w, h), dtype, extent=d)
    if d:       # h from the shapes alone: w gives d, and (h d) gives h
        assert torch.equal(einc.einsum(EQ, x, w), out)


def test_sublist_and_list_forms_of_the_operands():
    x, w = _operands(2, 3, 4, 5, 6, torch.float64, "contiguous")
    assert torch.equal(einc.einsum(EQ, [x, w], h=4), einc.einsum(EQ, x, w))
    with pytest.raises(errors.ArgumentError, match="sublist"):
        einc.einsum(x, [0, 1, 2], h=4)


@pytest.mark.interpreter
@pytest.mark.kernels
@pytest.mark.parametrize("layout", ["contiguous", "strided", "expanded"])
def test_the_example_through_generated_kernels(kernel_device, layout):
    x, w = _operands(2, 3, 4, 5, 6, torch.float32, layout)
    x, w = x.to(kernel_device), w.to(kernel_device)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="einc:")     # no fallback to torch
        out = einc.einsum(EQ, x, w, h=4)
        info = einc.explain(EQ, x, w, h=4)
    assert all(b.startswith("triton") for b in info.backends), info.backends
    assert out.is_contiguous()
    assert_close(out.cpu(), _oracle(x.cpu(), w.cpu(), 4), torch.float32, extent=5)


# ----------------------------------------------------------------------- no copies

class _Copies(TorchDispatchMode):
    """Counts the ops that copy data (and every op, by name)."""

    COPY = {"aten::copy_", "aten::clone", "aten::_to_copy", "aten::contiguous", "aten::_unsafe_view"}

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func._schema.name)
        return func(*args, **(kwargs or {}))

    @property
    def copies(self):
        return [o for o in self.ops if o in self.COPY]


@pytest.mark.parametrize("layout", ["contiguous", "strided", "expanded"])
def test_the_split_is_a_view_and_adds_no_copy(layout):
    x, w = _operands(2, 3, 4, 5, 6, torch.float32, layout)
    # the notation's own work on the input side: views only
    with _Copies() as mode:
        named = notation.structure(EQ)
        _, view_shapes = notation.resolve(named, [x.shape, w.shape], {"h": 4})
        views = named_axes.views([x, w], view_shapes)
    assert mode.copies == [] and set(mode.ops) <= {"aten::view"}, mode.ops
    assert views[0].untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    assert views[0].stride() == x.view(2, 3, 4, 5).stride() if layout != "strided" else True
    # the whole call copies exactly what the same call on a hand-made view copies
    einc.einsum(EQ, x, w, h=4)      # plan both first: planning is not the call
    einc.einsum(LETTERS, x.view(2, 3, 4, 5), w)
    with _Copies() as named_call:
        out = einc.einsum(EQ, x, w, h=4)
    with _Copies() as manual:
        einc.einsum(LETTERS, x.view(2, 3, 4, 5), w)
    assert named_call.copies == manual.copies, (named_call.ops, manual.ops)
    assert out.is_contiguous() and out.untyped_storage().nbytes() == out.numel() * out.element_size()


def test_the_merge_is_a_view_of_the_fresh_result():
    y = torch.randn(6, 7, 8)
    with _Copies() as mode:
        out = einc.einsum("(b h) q k -> b h q k", y, b=2)
    assert out.is_contiguous() and torch.equal(out, y.view(2, 3, 7, 8))
    assert out.untyped_storage().data_ptr() != y.untyped_storage().data_ptr()     # a fresh tensor, as always
    assert mode.copies.count("aten::copy_") + mode.copies.count("aten::clone") <= 1     # the one fresh result


# ----------------------------------------------------------------------- the notation

def test_names_composites_ellipsis_and_size_one_axes():
    g = torch.Generator().manual_seed(3)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    x, w = r(2, 3, 4), r(4, 5)
    assert torch.allclose(einc.einsum("batch seq dim, dim out -> batch seq out", x, w),
                          torch.einsum("bsd,do->bso", x, w))
    assert torch.allclose(einc.einsum("... d_in, d_in d_out -> ... d_out", x, w), torch.einsum("...d,do->...o", x, w))
    assert notation.is_named("... dim, dim out -> ... out") is False      # torch reads it: six indices
    y = r(2, 1, 4)
    out = einc.einsum("b 1 d, d -> b 1 1", y, r(4))
    assert out.shape == (2, 1, 1)
    assert torch.allclose(einc.einsum("b () d, d -> b", y, r(4) * 0 + 1), y.sum((1, 2)))
    # regrouping: a composite on both sides, grouped differently (a relabelled transpose)
    z = r(6, 5)
    assert torch.equal(einc.einsum("(a b) c -> b (a c)", z, a=2), z.view(2, 3, 5).permute(1, 0, 2).reshape(3, 10))
    assert torch.equal(einc.einsum("(a b) -> (b a)", r(6).view(6) * 0 + torch.arange(6.), a=2),
                       torch.arange(6.).view(2, 3).t().reshape(6))
    # multi-character and unicode names; underscores and digits
    assert torch.allclose(einc.einsum("x_1 ß, ß y2 -> x_1 y2", x[0], w), x[0] @ w)
    # a composite on a broadcast operand and a size-1 plain axis broadcasting against a composite part
    q = r(2, 12)
    assert torch.allclose(einc.einsum("b (h d), 1 h d -> b h", q, r(1, 1, 4) * 0 + 1, h=3),
                          q.view(2, 3, 4).sum(-1))


def test_the_rule_keeps_every_torch_equation():
    """An equation torch.einsum accepts keeps its meaning, however it is spaced."""
    a = torch.randn(2, 3, 4, 5, dtype=torch.float64)
    assert notation.is_named("ab cd") is False
    assert torch.equal(einc.einsum("ab cd", a), torch.einsum("ab cd", a))
    assert einc.einsum("ab cd->dc ba", a).shape == (5, 4, 3, 2)
    m, n = torch.randn(3, 4, dtype=torch.float64), torch.randn(4, 5, dtype=torch.float64)
    for text in ["ab, bc", "ab,bc->ac", "a b,b c->a c", " a b , b c -> a c ", "ab, bc ->ac", "a b, b c"]:
        assert notation.is_named(text) is False, text
        assert torch.allclose(einc.einsum(text, m, n), torch.einsum(text, m, n)), text
    # "a b,b c->a c" read by name (a parenthesis forces it) means the same
    assert torch.allclose(einc.einsum("(a) b, b c -> a c", m, n), torch.einsum("a b,b c->a c", m, n))
    # a torch-valid text whose names are longer than a letter keeps torch's meaning
    t = torch.randn(2, 3, 4, 5, 6, 2, 3, dtype=torch.float64)
    assert notation.is_named("head dim, dim -> head") is False
    with pytest.raises(errors.ShapeError):      # torch's reading: 'headdim' is 7 indices
        einc.einsum("head dim, dim -> head", torch.randn(4, 3), torch.randn(3))
    assert torch.allclose(einc.einsum("(head) dim, dim -> head", m, n[:, 0]), m @ n[:, 0])
    del t
    # torch's own errors are kept where the text has no mark of named notation
    for text in ["i1,jk->ik", "ij->i->j", "ij->ii", "i_,j"]:
        assert notation.is_named(text) is False
        with pytest.raises(errors.EquationError, match="subscript|ellipsis|appears"):
            einc.einsum(text, m, n)


def test_a_torch_text_written_like_names_says_how_to_read_it_by_name():
    """The trap: torch reads "head dim, dim -> head" (seven indices); where they do not fit
    the shapes, torch's error says that each letter is one index, and how to write it by name."""
    m, v = torch.randn(4, 3, dtype=torch.float64), torch.randn(3, dtype=torch.float64)
    with pytest.raises(errors.ShapeError) as info:
        einc.einsum("head dim, dim -> head", m, v)
    message = str(info.value)
    assert message.startswith("einsum(): the number of subscripts in the equation (7) does not match")
    assert "each letter is one index" in message and "'(head) dim, dim -> head'" in message
    assert torch.allclose(einc.einsum("(head) dim, dim -> head", m, v), m @ v)
    with pytest.raises(errors.ShapeError) as info:      # one-letter names: nothing to read otherwise
        einc.einsum("a b, b c -> a c", m, v)
    assert "parentheses" not in str(info.value)


def test_names_of_several_letters_torch_refuses_are_read_by_name():
    """A name of several characters beyond torch's a-z, A-Z is one axis, as an ASCII name
    torch refuses (x_1) is: torch reads no such text, so named notation takes it; where
    every name is one character einc's further letters stay one index each."""
    x = torch.randn(2, 3, dtype=torch.float64)
    assert notation.is_named("éa ñb -> ñb")
    assert torch.equal(einc.einsum("éa ñb -> ñb", x), x.sum(0))
    assert torch.equal(einc.einsum("é bc -> bc é", x), x.t())
    assert torch.allclose(einc.contract("éa ñb, ñb -> éa", x, torch.ones(3, dtype=torch.float64)), x.sum(1))
    assert notation.is_named("é ñ") is False and notation.is_named("é ñ -> ñ") is False
    assert torch.equal(einc.einsum("é ñ", x), x) and torch.equal(einc.einsum("é ñ -> ñ", x), x.sum(0))
    assert torch.equal(einc.einsum("ÀÁ,ÁÂ->ÀÂ", x, x.t()), x @ x.t())


@pytest.mark.parametrize("space", ["\u1680", "\u2003", "\u3000"])
def test_opt_einsum_s_symbols_that_are_whitespace_are_indices(space):
    """opt_einsum.get_symbol writes Unicode whitespace past U+00C0 as indices (get_symbol(5620)
    is U+1680, the Ogham space mark): both doors read each as one index, as opt_einsum does,
    never as a space between names (the fuzzer drew ``,,\u1680\u1680,ᓩ\u1680ᓩ,ᓩᓩ``)."""
    ops = [torch.randn(()), torch.randn(()), torch.randn(1, 1), torch.randn(2, 1, 2), torch.randn(2, 2)]
    text = f",,{space}{space},ᓩ{space}ᓩ,ᓩᓩ"
    assert notation.is_named(text) is False
    expected = torch.einsum(",,yy,ryr,rr", *[o.double() for o in ops])
    for door in (einc.einsum, einc.contract):
        torch.testing.assert_close(door(text, *ops).double(), expected)
    y = torch.randn(2, 4, 3, dtype=torch.float64)      # three indices, not the names é and ñ
    torch.testing.assert_close(einc.einsum(f"é{space}ñ->{space}", y), y.sum((0, 2)))


def test_the_marks_of_named_notation_read_every_character_as_the_unicode_wide_classes_did():
    """``equation``'s two patterns spell the whitespace below U+00C0 out (cheap to compile)
    instead of classes that reach U+10FFFF: over every code point, a character is a space of
    a mark, or of a name, exactly where the wide classes said so."""
    from einc.planner import equation
    every = "".join(map(chr, range(0x110000)))
    space = re.compile(r"[^\S\u00c0-\U0010ffff]")
    word = re.compile(r"(?:[^\s,.()\->]|[\u00c0-\U0010ffff])")
    assert space.findall(every) == re.findall(f"[{equation._SPACES}]", every)
    assert word.findall(every) == re.findall(equation._WORD.pattern[:-1], every)
    for text in ("a b -> b", "a\u1680b -> b", "a\x85b", "(a b) c", "é ñ", "a\tb,c->a", "ab,bc->ac"):
        assert bool(equation.NAMED_MARK.search(text)) == bool(re.search(rf"[()]|\w{space.pattern}+\w", text))
        assert equation._WORD.findall(text) == re.findall(rf"{word.pattern}+", text)


def test_a_name_torch_refuses_without_a_mark_says_how_to_write_it_by_name():
    """torch's error (class and sentence first), then how einc would read the name."""
    for text, forced in [("x1 -> x1", "(x1) -> x1"), ("i_j->i_j", "(i_j)->i_j")]:
        with pytest.raises(errors.EquationError) as info:
            einc.einsum(text, torch.ones(3))
        assert isinstance(info.value, RuntimeError)
        first = str(info.value).split("\n")[0]
        assert first.startswith("einsum(): invalid subscript given at index") and first.endswith(repr(forced))
        assert torch.equal(einc.einsum(forced, torch.arange(3.0)), torch.arange(3.0))
    with pytest.raises(errors.EquationError) as info:      # '1j' is no name: no named reading to suggest
        einc.einsum("i1,1j->ij", torch.ones(2, 2), torch.ones(2, 2))
    assert "named" not in str(info.value)


def test_a_keyword_size_python_normalizes_finds_its_axis():
    """Python passes a keyword in NFKC form (the ligature fi as 'fi', a black-letter H as 'H')."""
    x = torch.randn(2, 6, dtype=torch.float64)
    assert torch.equal(einc.einsum("b (\ufb01 d) -> b \ufb01 d", x, **{"fi": 3}), x.view(2, 3, 2))
    assert torch.equal(einc.einsum("b (\u210c d) -> b d \u210c", x, H=2), x.view(2, 2, 3).transpose(1, 2))
    assert einc.contract_expression("b (\ufb01 d) -> b \ufb01 d", (2, 6), fi=3)(x).shape == (2, 3, 2)
    assert einc.explain("b (\ufb01 d) -> b \ufb01 d", (2, 6), fi=3).info.plan is not None
    assert torch.equal(einc.einsum("b (\ufb01 d) -> b \ufb01 d", x, **{"\ufb01": 3}), x.view(2, 3, 2))
    traced = torch.compile(lambda t: einc.einsum("b (\ufb01 d) -> b \ufb01 d", t, fi=3), fullgraph=True,
                           backend="eager")
    assert torch.equal(traced(x), x.view(2, 3, 2))
    with pytest.raises(errors.SizeKeywordError, match="one name"):     # two axes Python would read as H
        einc.einsum("b (\u210c d), \u210d -> b", x, torch.ones(2), H=2)
    got = subprocess.run([sys.executable, "-c", "import torch, einc\n"
                          "print(tuple(einc.einsum('b (\ufb01 d) -> b \ufb01 d', torch.ones(2, 6), \ufb01=3).shape))"],
                         capture_output=True, text=True, timeout=120)
    assert got.stdout.strip() == "(2, 3, 2)", got.stderr


def test_random_torch_equations_with_spaces_are_read_as_torch():
    rng = random.Random(7)
    for _ in range(300):
        letters = rng.sample("abcdefg", 5)
        terms = ["".join(rng.sample(letters, rng.randint(0, 3))) for _ in range(rng.randint(1, 3))]
        out = "".join(rng.sample(sorted(set("".join(terms))), rng.randint(0, len(set("".join(terms))))))
        text = ",".join(terms) + ("->" + out if rng.random() < 0.7 else "")
        spaced = "".join(ch + (" " * rng.randint(0, 2) if ch.isalpha() else "") for ch in text)
        assert notation.is_named(spaced) is False, spaced
        ops = [torch.randn([2] * len(t), dtype=torch.float64) for t in terms]
        assert torch.allclose(einc.einsum(spaced, *ops), torch.einsum(spaced, *ops)), spaced
        if "->" in text:    # the same text read by name (one axis put in parentheses): the same result
            forced = ",".join(" ".join(t) for t in terms)
            forced = forced.replace(terms[0][0], f"({terms[0][0]})", 1) if terms[0] else "(), " + forced[0:]
            if not terms[0]:
                continue
            forced += " -> " + " ".join(out)
            assert notation.is_named(forced)
            assert torch.allclose(einc.einsum(forced, *ops), torch.einsum(text, *ops)), forced


def test_ellipses_that_do_not_broadcast_are_named_as_the_call_wrote_them():
    """Not in the resolved equation's letters and split shapes, with out= or without."""
    a, b = torch.randn(2, 3, 4, 6), torch.randn(3, 4, 1)
    for out in (None, torch.empty(2, 3, 4, 6)):
        with pytest.raises(errors.ShapeError) as info:
            einc.einsum("... (h d), ... -> ... (d h)", a, b, h=2, out=out)
        message = str(info.value)
        assert "covers (3, 4, 1)" in message and "(2, 3, 4) of operand 0" in message and "...hd" not in message
        assert message.endswith("  ... (h d), ... -> ... (d h)\n             ^")
    c = torch.randn(3, 1)       # (3, 1) broadcasts against (2, 3, 4)
    want = torch.einsum("...hd,...->...dh", a.view(2, 3, 4, 2, 3), c).reshape(2, 3, 4, 6)
    assert torch.allclose(einc.einsum("... (h d), ... -> ... (d h)", a, c, h=2), want)


def test_letters_follow_the_names():
    assert notation.structure(EQ).equation == LETTERS
    assert notation.structure("batch seq dim, dim out -> batch seq out").equation == "bsd,do->bso"
    assert notation.structure("(b) bias, bias -> b").equation == "ba,a->b"
    assert notation.structure("b bias, bias -> b").equation == "bbias,bias->b"     # torch reads it


# ----------------------------------------------------------------------- errors

A30 = torch.randn(2, 30)


@pytest.mark.parametrize("text,operands,sizes,cls,fragments", [
    ("b (h d) -> b h d", [A30], {"h": 8}, errors.ShapeError,
     ["(h d) of operand 0 has size 30", "h=8", "does not divide", "  b (h d) -> b h d\n       ^"]),
    ("b (h d), h d e -> b (h e)", [A30, torch.randn(8, 4, 2)], {}, errors.ShapeError,
     ["size 30", "h=8 * d=4 is 32", "\n    ^"]),
    ("batch dim, dim out -> batch out", [torch.randn(2, 3), torch.randn(4, 5)], {}, errors.ShapeError,
     ["axis dim has two sizes", "3 in operand 0", "4 in operand 1", "batch dim, dim out -> batch out\n"
      "             ^"]),
    ("batch (dim) -> batch", [torch.randn(2, 3)], {"dim": 4}, errors.ShapeError,
     ["dim has two sizes", "4 in the keyword", "3 in operand 0"]),
    ("(a b) -> (b a)", [torch.randn(6)], {}, errors.ShapeError,      # the same composite, regrouped
     ["cannot split (a b) of operand 0 (size 6)", "a and b (the output groups them as (b a))", "by keyword",
      "  (a b) -> (b a)\n   ^"]),
    ("(a b) c, a -> (a b c)", [torch.randn(6, 2), torch.randn(4)], {}, errors.ShapeError,
     ["(a b) of operand 0 has size 6, which a=4 does not divide"]),
    ("b (optimize d) -> b d", [A30], {}, errors.ShapeError,   # named like einsum's keyword
     ["nothing gives the size of optimize, and it cannot be passed by keyword", "rename the axis"]),
    ("b (layout d) -> b d", [A30], {"layout": 2}, errors.ShapeError,   # (it advised passing layout=...)
     ["nothing gives the size of layout, and it cannot be passed by keyword", "rename the axis"]),
    ("(h d) c -> h d c", [A30.numpy()], {"h": 2}, errors.OperandTypeError,   # (numpy's view took a dtype)
     ["operand 0 must be a torch.Tensor, got ndarray"]),
    ("b (h d) -> b d", [A30], {"h": 0}, errors.ShapeError,           # 30 = 0 * d: no d at all
     ["(h d) of operand 0 has size 30, which h=0 cannot make", "no size for d", "  b (h d) -> b d\n       ^"]),
    ("b (h d) -> b h d", [A30], {"heads": 8}, errors.SizeKeywordError,
     ["unknown keyword heads=8", "its axes: b, h, d"]),
    ("ij,jk", [A30.T, A30], {"optimise": "greedy"}, TypeError,       # as torch.einsum's unexpected keyword
     ["unknown keyword optimise='greedy'", "neither a keyword of this function nor an axis"]),
    ("b 2x -> b", [A30], {}, errors.EquationError, ["'2x'", "not an axis name", "  b 2x -> b\n    ^"]),
    ("b (h (d)) -> b", [A30], {}, errors.EquationError, ["nested", "\n       ^"]),
    ("b (h d -> b", [A30], {}, errors.EquationError, ["never closed"]),
    ("b h, h_2", [A30, torch.randn(30)], {}, errors.EquationError, ["needs '->'"]),
    ("b x -> b y", [A30], {}, errors.EquationError, ["output axis y does not appear", "\n           ^"]),
    ("b x -> x x", [A30], {}, errors.EquationError, ["appears more than once"]),
    ("b 1 -> b", [A30], {}, errors.ShapeError, ["axis '1' of operand 0 has size 30"]),
    ("b x y_ -> b", [A30], {}, errors.ShapeError, ["operand 0 has 2 dimensions", "3 axes"]),
    ("b (h d) -> b h d", [A30], {"h": 2.5}, errors.ArgumentError, ["h=2.5 must be an int"]),
    ("b (h h) -> b h", [A30], {}, errors.EquationError, ["twice in one composite"]),
])
def test_errors_name_the_axis_the_operand_and_the_sizes(text, operands, sizes, cls, fragments):
    with pytest.raises(cls) as err:
        einc.einsum(text, *operands, **sizes)
    msg = str(err.value)
    for f in fragments:
        assert f in msg, (f, msg)
    assert isinstance(err.value, errors.EincError)


# ----------------------------------------------------------------------- every door

def test_autograd_gradcheck():
    x = torch.randn(2, 3, 12, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3, 4, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w: einc.einsum(EQ, x, w, h=3), (x, w))
    assert torch.autograd.gradgradcheck(lambda x, w: einc.einsum(EQ, x, w), (x, w))
    xc = torch.randn(2, 6, dtype=torch.complex128, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: einc.einsum("b (h d) -> (d b) h", x, h=2), (xc,))
    xs = torch.randn(3, 2, 24, dtype=torch.float64).transpose(0, 1)[:, :, ::2].detach().requires_grad_()
    assert torch.autograd.gradcheck(lambda x, w: einc.einsum(EQ, x, w), (xs, w))


def test_vmap():
    xs = torch.randn(7, 2, 3, 12, dtype=torch.float64)
    w = torch.randn(3, 4, 5, dtype=torch.float64)
    out = torch.func.vmap(lambda x: einc.einsum(EQ, x, w, h=3))(xs)
    expected = torch.einsum("zbnhd,hde->zbnhe", xs.view(7, 2, 3, 3, 4), w).reshape(7, 2, 3, 15)
    torch.testing.assert_close(out, expected)
    ws = torch.randn(7, 3, 4, 5, dtype=torch.float64)
    out = torch.func.vmap(lambda x, w: einc.einsum(EQ, x, w), in_dims=(1, 0))(xs.transpose(0, 1), ws)
    expected = torch.einsum("zbnhd,zhde->zbnhe", xs.view(7, 2, 3, 3, 4), ws).reshape(7, 2, 3, 15)
    torch.testing.assert_close(out, expected)
    g = torch.func.grad(lambda x: einc.einsum(EQ, x, w).sum())(xs[0])
    torch.testing.assert_close(g, torch.func.grad(lambda x: _oracle(x, w, 3).sum())(xs[0]))


def _graphs(fn, *args, dynamic=True):
    from torch._dynamo.testing import EagerAndRecordGraphs
    torch._dynamo.reset()
    backend = EagerAndRecordGraphs()
    out = torch.compile(fn, backend=backend, fullgraph=True, dynamic=dynamic)(*args)
    return out, backend.graphs


def test_torch_compile_fullgraph_dynamic_takes_the_resolved_equation():
    def f(x, w):
        return einc.einsum(EQ, x, w, h=4)
    compiled = torch.compile(f, fullgraph=True, dynamic=True)
    for b in (2, 3, 5):
        x, w = _operands(b, 3, 4, 5, 6, torch.float32, "strided", seed=b)
        out = compiled(x, w)
        assert out.is_contiguous()
        assert_close(out, _oracle(x, w, 4), torch.float32, extent=5)
    out, graphs = _graphs(f, *_operands(2, 3, 4, 5, 6, torch.float32, "contiguous"))
    assert len(graphs) == 1
    code = graphs[0].code
    assert "torch.ops.einc.einsum.default('bnhd,hde->bnhe'" in code and ".view(" in code and ".reshape(" in code
    assert "copy" not in code and "clone" not in code and "contiguous" not in code
    # training under compile: the backward of the op and the views
    x = torch.randn(2, 3, 20, requires_grad=True)
    w = torch.randn(4, 5, 6, requires_grad=True)
    torch.compile(f, fullgraph=True, dynamic=True)(x, w).pow(2).sum().backward()
    gx, gw = x.grad.clone(), w.grad.clone()
    x.grad = w.grad = None
    _oracle(x, w, 4).pow(2).sum().backward()
    torch.testing.assert_close(gx.double(), x.grad.double(), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(gw.double(), w.grad.double(), rtol=1e-4, atol=1e-4)


def test_compile_without_sizes_and_the_einc_backend():
    def f(y):
        return einc.einsum("(b h) q k -> b h q k", y, b=2) + 0
    y = torch.randn(6, 4, 5)
    _, graphs = _graphs(f, y)
    assert len(graphs) == 1
    assert torch.equal(torch.compile(f, backend="einc")(y), y.view(2, 3, 4, 5))

    def g(x, w):
        return einc.einsum(EQ, x, w).relu()
    x, w = _operands(2, 3, 4, 5, 6, torch.float32, "contiguous")
    torch._dynamo.reset()
    assert_close(torch.compile(g, backend="einc", fullgraph=True)(x, w), _oracle(x, w, 4).relu(), torch.float32, 5)


def test_contract_expression_path_and_constants():
    x, w = _operands(2, 3, 4, 5, 6, torch.float64, "strided")
    expr = einc.contract_expression(EQ, x.shape, w.shape, h=4)
    assert torch.allclose(expr(x, w), _oracle(x, w, 4))
    assert "Named axes" in str(expr) and "bnhd,hde->bnhe" in repr(expr)
    out = torch.empty(2, 3, 24, dtype=torch.float64)
    assert expr(x, w, out=out) is out
    torch.testing.assert_close(out, _oracle(x, w, 4))
    with_constant = einc.contract_expression(EQ, x.shape, w, constants=[1])
    assert torch.allclose(with_constant(x), _oracle(x, w, 4))
    assert torch.allclose(expr(x[:1], w), _oracle(x[:1], w, 4))      # another batch size, as unnamed
    with pytest.raises(errors.ShapeError, match="has size 20, but h=4 \\* d=6 is 24"):
        expr(x, torch.randn(4, 6, 6, dtype=torch.float64))
    as_written = r"for 'b n \(h d\), h d e -> b n \(h e\)' takes 2 operands"     # not the resolved letters
    with pytest.raises(errors.OperandCountError, match=as_written):
        expr(x)
    with pytest.raises(errors.OperandCountError, match=as_written):
        expr(x, w, w)
    with pytest.raises(errors.OperandCountError, match=r"takes 1 operands \(its operands \[1\] are constants\), got 2"):
        with_constant(x, w)
    path, info = einc.contract_path(EQ, x.shape, w.shape, h=4)
    assert path == [(0, 1)] and info.eq == "bnhd,hde->bnhe"


def test_a_named_expression_merges_its_output_uncached_under_compile():
    """A named expression called in a compiled function merged its output through the lru_cache'd
    helper (merged without ``traced``), so dynamo traced the cache's wrapper and warned of it; it
    takes the traced merge the einsum door takes: no warning, the eager answer."""
    x, w = _operands(2, 3, 4, 5, 6, torch.float64, "strided")
    for expr, operands in ((einc.contract_expression(EQ, x.shape, w.shape, h=4), (x, w)),
                           (einc.contract_expression(EQ, x.shape, w, constants=[1], h=4), (x,))):
        torch._dynamo.reset()
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                got = torch.compile(lambda *ops: expr(*ops) * 2, fullgraph=True, backend="eager")(*operands)
        finally:
            torch._dynamo.reset()
        assert not [str(c.message) for c in caught if "lru_cache" in str(c.message)]
        assert torch.equal(got, expr(*operands) * 2)


def test_a_dtype_error_names_the_equation_as_written():
    """float32 beside float64 operands, which torch's path refuses to contract in one step:
    the DtypeError names the equation the caller wrote, as the named call's other errors do,
    not the resolved letters ('bnhd,hde->bnhe'; an expression with constants, its remainder
    'abcd,cde->abce'), in every door (out=, the sharing context and autocast too); the plain
    call keeps its own."""
    x, w = torch.randn(2, 3, 12), torch.randn(3, 4, 5, dtype=torch.float64)
    calls = [lambda: einc.einsum(EQ, x, w, h=3), lambda: einc.contract(EQ, x, w, h=3),
             lambda: einc.einsum(EQ, x, w, h=3, out=torch.empty(2, 3, 15, dtype=torch.float64)),
             lambda: einc.contract_expression(EQ, x.shape, w.shape, h=3)(x, w),
             lambda: einc.contract_expression(EQ, x.shape, w, constants=[1], h=3)(x)]
    for context in (contextlib.nullcontext, einc.shared_intermediates, lambda: torch.autocast("cpu")):
        for call in calls:
            with context(), pytest.raises(errors.DtypeError) as info:
                call()
            message = str(info.value)
            assert repr(EQ) in message and "float64" in message, message
            assert "bnhd" not in message and "abcd" not in message, message
    with pytest.raises(errors.UnsupportedDtypeError, match=re.escape("evaluate 'b (h d), h d -> b'")):
        einc.einsum("b (h d), h d -> b", x[0] > 0, w[:, :, 0] > 0, h=3)
    with pytest.raises(errors.DtypeError, match="'bnhd,hde->bnhe'"):      # a plain call: its own letters
        einc.einsum(LETTERS, x.view(2, 3, 3, 4), w)


def test_an_expressions_operand_count_sentence_has_one_home():
    """named.py's NamedExpression and ContractExpression say the same operand-count sentence
    (named.py may not import opt_einsum_api): both take ``errors.expression_count``, the one
    place the sentence is written, so the two cannot drift."""
    package = Path(einc.__file__).parent
    homes = sorted(str(p.relative_to(package)) for p in package.rglob("*.py")
                   if "this expression for {" in p.read_text(encoding="utf-8"))
    assert homes == ["errors.py"], homes
    x, w = _operands(2, 3, 4, 5, 6, torch.float64, "strided")
    for expr, operands, constants in ((einc.contract_expression(EQ, x.shape, w, constants=[1], h=4), (x, w), [1]),
                                      (einc.contract_expression(LETTERS, (2, 3, 4, 5), w, constants=[1]),
                                       (x.view(2, 3, 4, 5), w), [1])):
        with pytest.raises(errors.OperandCountError) as info:
            expr(*operands)
        assert str(info.value) == errors.expression_count(expr.equation, 1, constants, 2)


def test_explain_shows_the_names():
    x, w = _operands(2, 3, 4, 5, 6, torch.float32, "contiguous")
    text = str(einc.explain(EQ, x, w, h=4))
    for f in ["Named axes: b n (h d), h d e -> b n (h e)", "resolved equation: bnhd,hde->bnhe",
              "h=4, d=5", "(h d) split into h=4 d=5 by strides: a view, no copy", "(h e) merged",
              "Complete contraction:  bnhd,hde->bnhe"]:
        assert f in text, (f, text)
    long = str(einc.explain("batch seq dim, dim out -> batch seq out", (2, 3, 4), (4, 5)))
    assert "letters" not in long or "batch=b" in long
    assert "dim=d" in long and "out=o" in long
    assert einc.explain(EQ, x, w).to_dict()["named"].startswith("Named axes")


def test_explain_says_a_merge_may_copy_under_layout_any(monkeypatch):
    """Under ``layout="any"`` the resolved call's result is in the order its last step
    writes, and the named merge is a view only where those strides merge: ``(c j)`` of a
    ``cjba`` result laid out ``a``-first is a copy.  explain (and an expression's printout,
    and ``einc explain`` under ``EINC_LAYOUT=any``) said "a view of einc's contiguous
    result, no copy" all the same."""
    eq, shapes = "a k b c, j k -> (c j) b a", [(48, 48, 40, 48), (24, 48)]
    a, b = (torch.randn(s) for s in shapes)
    plain = einc.einsum("akbc,jk->cjba", a, b, layout="any")
    with pytest.raises(RuntimeError):       # its (c j) is no view: the merge copies
        plain.view(48 * 24, 40, 48)
    copy = "(c j) merged from c=48 j=24: a view of einc's result where its strides merge, else a contiguous copy"
    texts = [str(einc.explain(eq, a, b, layout="any")), str(einc.explain(eq, *shapes, layout="ANY")),
             str(einc.contract_expression(eq, *shapes, layout="any"))]
    monkeypatch.setenv("EINC_LAYOUT", "any")
    texts += [str(einc.explain(eq, *shapes)), notation.for_cli(eq, shapes, {})[2]]
    for text in texts:
        assert copy in text and "no copy" not in text.split("(c j) merged")[1].split("\n")[0], text
    monkeypatch.delenv("EINC_LAYOUT")
    for text in (str(einc.explain(eq, *shapes)), str(einc.contract_expression(eq, *shapes))):
        assert "(c j) merged from c=48 j=24: a view of einc's contiguous result, no copy" in text
    assert einc.einsum(eq, a, b).is_contiguous()


def test_explain_and_contract_path_take_named_operands_as_one_tuple_and_refuse_sublists():
    x, w = torch.randn(2, 3, 12), torch.randn(3, 4, 5)
    eq = "b n (h d), h d e -> b n (h e)"
    for operands in [(x, w), [x, w], ((2, 3, 12), (3, 4, 5))]:     # (a tuple of either failed)
        assert "resolved equation: bnhd,hde->bnhe" in str(einc.explain(eq, operands, h=3))
    assert einc.contract_path(eq, (x, w), h=3)[1].opt_cost == einc.contract_path(eq, x, w, h=3)[1].opt_cost
    for door in (einc.explain, einc.contract_path):
        with pytest.raises(errors.ArgumentError, match="keyword sizes .* name the axes of an equation string"):
            door(x, [0, 1, 2], w, [1, 3, 4], [0, 3], j=3)       # ("the equation must be a str, got Tensor")


def test_sliced_plans():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(4, 8, 64, generator=g, dtype=torch.float64)
    w = torch.randn(8, 8, 16, generator=g, dtype=torch.float64)
    out = einc.einsum(EQ, x, w, memory_limit=600)
    info = einc.explain(EQ, x, w, memory_limit=600)
    assert info.slicing is not None
    torch.testing.assert_close(out, _oracle(x, w, 8))


def test_out_and_torch_function():
    x, w = _operands(2, 3, 4, 5, 6, torch.float64, "contiguous")
    out = torch.empty(2, 3, 24, dtype=torch.float64)
    assert einc.einsum(EQ, x, w, out=out) is out
    torch.testing.assert_close(out, _oracle(x, w, 4))
    with pytest.raises(errors.OutError, match=r"out= has shape \(2, 3, 23\), but the result has shape \(2, 3, 24\)"):
        einc.einsum(EQ, x, w, out=torch.empty(2, 3, 23, dtype=torch.float64))
    # an ellipsis's dimensions named by their sizes (it said "(..., 24)"), through einsum and an expression
    dots = "... (h d), h d e -> ... (h e)"
    expr = einc.contract_expression(dots, x.shape, w.shape, h=4)
    for run in (lambda out: einc.einsum(dots, x, w, out=out), lambda out: expr(x, w, out=out)):
        with pytest.raises(errors.OutError, match=r"out= has shape \(6, 24\), but the result has shape \(2, 3, 24\)"):
            run(torch.empty(6, 24, dtype=torch.float64))
    with pytest.raises(errors.OutError, match="dtype"):
        einc.einsum(EQ, x, w, out=torch.empty(2, 3, 24))
    with pytest.raises(errors.OutError, match="automatic differentiation"):      # torch's out= rule
        einc.einsum(EQ, x.clone().requires_grad_(), w, out=out)
    strided = torch.empty(24, 3, 2, dtype=torch.float64).permute(2, 1, 0)     # written in place, through strides
    assert einc.einsum(EQ, x, w, out=strided) is strided
    torch.testing.assert_close(strided, _oracle(x, w, 4))
    plain = torch.empty(2, 3, 6, dtype=torch.float64)
    assert einc.einsum("b n (h d), h d e -> b n e", x, w, out=plain) is plain
    traced = torch.fx.symbolic_trace(lambda x, w: einc.einsum(EQ, x, w, h=4))
    torch.testing.assert_close(traced(x, w), _oracle(x, w, 4))


@pytest.mark.slow
def test_cli_dump_and_explain(tmp_path):
    def run(*argv):
        return subprocess.run([sys.executable, "-m", "einc", *argv], capture_output=True, text=True, cwd=tmp_path)
    done = run("dump", EQ, "--shapes", "2x8x64,8x8x16", "--size", "h=8")
    assert done.returncode == 0, done.stderr
    assert "resolved equation: bnhd,hde->bnhe" in done.stdout and "def launch(" in done.stdout
    done = run("explain", EQ, "--shapes", "2x8x64,8x8x16", "--json")
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    assert info["named"].startswith("Named axes") and info["shapes"] == [[2, 8, 8, 8], [8, 8, 16]]
    done = run("explain", EQ, "--shapes", "2x8x30,8x4x16", "--size", "h=8")
    assert done.returncode == 2 and "size 30" in done.stderr and "^" in done.stderr
    done = run("explain", "b (h d) -> b h d", "--shapes", "2x6", "--size", "bad")
    assert done.returncode == 2 and "NAME=N" in done.stderr


def test_many_layouts_against_manual_views():
    """Every operand layout and dtype, composite axes on several operands and on the output."""
    g = torch.Generator().manual_seed(11)
    cases = [
        ("(b h) q d, (b h) k d -> b h q k", [(6, 4, 5), (6, 3, 5)], {"b": 2},
         lambda a, c: torch.einsum("bhqd,bhkd->bhqk", a.reshape(2, 3, 4, 5), c.reshape(2, 3, 3, 5))),
        ("b q (h d), b k (h d) -> b (q h) k", [(2, 4, 12), (2, 3, 12)], {"h": 3},
         lambda a, c: torch.einsum("bqhd,bkhd->bqhk", a.reshape(2, 4, 3, 4), c.reshape(2, 3, 3, 4)).reshape(2, 12, 3)),
        ("i (j k), (k l) m -> (i m) (j l)", [(2, 6), (6, 3)], {"j": 2, "l": 2},
         lambda a, c: torch.einsum("ijk,klm->imjl", a.reshape(2, 2, 3), c.reshape(3, 2, 3)).reshape(6, 4)),
    ]
    for (text, shapes, sizes, ref), dtype, layout in itertools.product(
            cases, [torch.float64, torch.float32, torch.complex64], ["plain", "transposed", "expanded"]):
        ops = []
        for s in shapes:
            t = torch.randn(*s, generator=g, dtype=torch.float64).to(dtype)
            if layout == "transposed":
                t = t.transpose(0, -1).contiguous().transpose(0, -1)
            elif layout == "expanded":
                t = t[:1].expand(*s)
            ops.append(t)
        out = einc.einsum(text, *ops, **sizes)
        up = torch.complex128 if dtype.is_complex else torch.float64
        assert out.is_contiguous()
        assert_close(out, ref(*[o.to(up) for o in ops]), dtype, extent=12)


def test_the_readme_section_runs():
    """README "Named and composite axes": its Python blocks run, and the rule is one sentence there."""
    from pathlib import Path
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Named and composite axes", 1)[1].split("\n### ", 1)[0]
    blocks = [part.split("```", 1)[0] for part in section.split("```python\n")[1:]]
    assert len(blocks) == 2
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})
    assert "**The rule: an equation that einc reads in torch's notation" in section
    with pytest.raises(errors.ShapeError) as err:       # the error shown there is the one einc raises
        einc.einsum("b (h d) -> b h d", torch.randn(2, 30), h=8)
    assert str(err.value) in section


@pytest.mark.parametrize("fullgraph", [True, False])
def test_errors_under_torch_compile_are_einc_s(fullgraph):
    def f(x):
        return einc.einsum("b (h d) -> b h d", x, h=8)
    torch._dynamo.reset()
    with pytest.raises(Exception) as err:
        torch.compile(f, fullgraph=fullgraph, dynamic=True)(torch.randn(2, 30))
    assert "(h d) of operand 0 has size 30, which h=8 does not divide" in str(err.value)
    assert "  b (h d) -> b h d\n       ^" in str(err.value)


@pytest.mark.parametrize("fullgraph", [True, False])
def test_a_named_call_with_out_traces_no_table_of_letters(fullgraph):
    """Under torch.compile a named call with out= traces parse of its resolved equation with
    letter() reading a str, a constant to dynamo, not a table of letters whose making dynamo
    would trace through its cache, code point by code point (some twelve thousand): most of the
    trace, before the error eager raises at once, and on every such call that works."""
    from einc.planner import equation
    before = equation._alphabet.cache_info()
    assert [equation.letter(i) for i in (0, 25, 26, 51, 52)] == ["a", "z", "A", "Z", "\u00c0"]
    assert equation._alphabet.cache_info()[:2] == before[:2]      # (hits, misses): no table asked for
    narrow = len(equation._alphabet(False))
    assert equation.letter(narrow - 1) == equation._alphabet(False)[-1]
    assert equation.letter(narrow) == equation._alphabet(True)[narrow]
    x, w = torch.randn(3, 4), torch.randn(2, 2, 5)
    f = lambda x, w, o: einc.einsum("b (h d), h d e -> b (h e)", x, w, out=o, h=2)     # noqa: E731
    with pytest.raises(errors.OutError) as eager:
        f(x, w, torch.zeros(3, 7))
    torch._dynamo.reset()
    try:
        compiled = torch.compile(f, fullgraph=fullgraph, backend="eager")
        with pytest.raises(errors.OutError) as traced:
            compiled(x, w, torch.zeros(3, 7))
        out = torch.zeros(3, 10)
        assert compiled(x, w, out) is out
    finally:
        torch._dynamo.reset()
    assert str(traced.value) == str(eager.value)
    torch.testing.assert_close(out, f(x, w, torch.zeros(3, 10)))


def test_the_notation_module_imports_no_torch():
    from pathlib import Path
    script = Path(__file__).resolve().parents[1] / "support" / "scripts" / "notation_imports_no_torch.py"
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "('bnhd,hde->bnhe', [(2, 3, 2, 4), (2, 4, 5)])"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "strided", "expanded"])
def test_the_example_under_compile_and_vmap_for_every_dtype_and_layout(dtype, layout):
    """One compiled function (fullgraph, dynamic) over sizes 0, 1 and more; vmap over a stack."""
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, w: einc.einsum(EQ, x, w, h=4), fullgraph=True, dynamic=True,
                             backend="aot_eager")
    for b, n, h, d, e in [(2, 3, 4, 5, 6), (0, 3, 4, 5, 6), (1, 1, 4, 1, 1), (3, 2, 4, 3, 2)]:
        x, w = _operands(b, n, h, d, e, dtype, layout, seed=b + d)
        out = compiled(x, w)
        assert out.is_contiguous() and out.dtype == dtype and out.shape == (b, n, h * e)
        assert_close(out, _oracle(x, w, h), dtype, extent=d)
    xs = torch.stack([_operands(2, 3, 4, 5, 6, dtype, layout, seed=s)[0] for s in range(3)], 1)     # batch dim 1
    w = _operands(2, 3, 4, 5, 6, dtype, layout)[1]
    out = torch.func.vmap(lambda x: einc.einsum(EQ, x, w, h=4), in_dims=1)(xs)
    for s in range(3):
        assert_close(out[s], _oracle(xs[:, s], w, 4), dtype, extent=5)


@pytest.mark.parametrize("sizes", [(2, 3, 2, 3, 2), (0, 2, 2, 3, 2), (1, 1, 1, 1, 1), (2, 1, 2, 0, 3)],
                         ids=lambda s: "x".join(map(str, s)))
def test_gradcheck_sizes_0_and_1(sizes):
    b, n, h, d, e = sizes
    for dtype in (torch.float64, torch.complex128):
        x, w = _operands(b, n, h, d, e, dtype, "strided")
        x, w = x.detach().requires_grad_(), w.detach().requires_grad_()
        assert torch.autograd.gradcheck(lambda x, w: einc.einsum(EQ, x, w, h=h), (x, w))


def test_bench_named_runs():
    """bench/named.py (named call vs views, alternating rounds) runs and checks its answers."""
    from pathlib import Path
    script = Path(__file__).resolve().parents[2] / "bench" / "named.py"
    done = subprocess.run([sys.executable, str(script), "--quick"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| small") or line.startswith("| proj")]
    assert len(rows) == 6 and all(" us | " in r for r in rows), done.stdout


def test_torchscript_export_and_jit_trace():
    x, w = _operands(2, 3, 4, 5, 6, torch.float32, "strided")

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return einc.einsum("b n (h d), h d e -> b n (h e)", x, w)
    scripted = torch.jit.script(f)
    assert "einc::einsum" in str(scripted.graph)
    assert_close(scripted(x, w), _oracle(x, w, 4), torch.float32, extent=5)

    class M(torch.nn.Module):
        def forward(self, x, w):
            return einc.einsum(EQ, x, w, h=4)
    exported = torch.export.export(M(), (x, w))
    targets = [str(n.target) for n in exported.graph.nodes if n.op == "call_function"]
    assert targets == ["aten.view.default", "einc.einsum.default", "aten.reshape.default"], targets
    assert_close(exported.module()(x, w), _oracle(x, w, 4), torch.float32, extent=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # jit.trace warns that it records the shapes as constants
        traced = torch.jit.trace(M(), (x, w))
    assert_close(traced(x, w), _oracle(x, w, 4), torch.float32, extent=5)


def test_a_named_expression_takes_other_sizes_in_every_door_as_an_unnamed_one():
    """An unnamed expression (as opt_einsum's) takes operands of the planned ranks at other
    sizes, and so does a named one, in every door, rather than refusing them ("... but the
    expression was planned for (2, 3, 20)") for no reason a caller could see: its names are
    resolved at the call's shapes, among the constants', with the keyword sizes it was built
    with: einsum's answer, with gradients, eagerly, traced by
    ``torch.jit.trace`` (each split an ``einc::named_view``) and under torch.compile; where a
    size does not split, einsum's ShapeError (TorchScript: a RuntimeError with its text)."""
    w0 = torch.randn(4, 5, 6, dtype=torch.float64)
    plain = einc.contract_expression(EQ, (2, 3, 20), (4, 5, 6), h=4)
    constant = einc.contract_expression(EQ, (2, 3, 20), w0, constants=[1], h=4)
    unnamed = einc.contract_expression("bnk,hde->bnhe", (2, 3, 20), (4, 5, 6))
    assert unnamed(torch.randn(5, 3, 20), torch.randn(4, 5, 6)).shape == (5, 3, 4, 6)     # (the unnamed rule)
    calls = {"plain": lambda x, w: plain(x, w), "constant": lambda x, w: constant(x)}
    good = {"plain": [((5, 3, 20), (4, 5, 6)), ((1, 7, 24), (4, 6, 2))],
            "constant": [((5, 3, 20), (4, 5, 6)), ((3, 1, 20), (4, 5, 6))]}
    bad = {"plain": [((5, 3, 22), (4, 5, 6)), ((5, 3, 20), (8, 5, 6))], "constant": [((5, 3, 22), (4, 5, 6))]}
    for name, fn in calls.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")     # jit.trace warns that it records the shapes as constants
            traced = torch.jit.trace(fn, (torch.randn(2, 3, 20, dtype=torch.float64), w0.clone()))
        assert "einc::named_view" in str(traced.graph)
        compiled = torch.compile(fn, fullgraph=True, dynamic=True, backend="eager")
        for x_shape, w_shape in good[name]:
            x = torch.randn(x_shape, dtype=torch.float64)
            w = w0 if name == "constant" else torch.randn(w_shape, dtype=torch.float64)
            leaf = x.clone().requires_grad_()
            want = einc.einsum(EQ, leaf, w, h=4)
            (want_grad,) = torch.autograd.grad(want.sum(), leaf)
            torch._dynamo.reset()
            try:
                for door in (fn, traced, compiled):
                    leaf = x.clone().requires_grad_()
                    got = door(leaf, w)
                    assert_close(got, want.detach(), torch.float64)
                    assert_close(torch.autograd.grad(got.sum(), leaf)[0], want_grad, torch.float64)
            finally:
                torch._dynamo.reset()
        for x_shape, w_shape in bad[name]:
            x = torch.randn(x_shape, dtype=torch.float64)
            w = w0 if name == "constant" else torch.randn(w_shape, dtype=torch.float64)
            with pytest.raises(errors.ShapeError) as eager:
                fn(x, w)
            with pytest.raises(errors.ShapeError) as by_einsum:
                einc.einsum(EQ, x, w, h=4)
            assert str(eager.value) == str(by_einsum.value)
            with pytest.raises(RuntimeError) as info:
                traced(x, w)
            assert f"ShapeError: {eager.value}" in str(info.value)
            torch._dynamo.reset()
            try:
                with pytest.raises(errors.ShapeError) as dynamo:
                    compiled(x, w)
            finally:
                torch._dynamo.reset()
            assert str(dynamo.value) == str(eager.value)


def test_a_traced_named_call_at_sizes_that_do_not_split_raises_the_eager_error():
    """``torch.jit.trace`` records a named call's split as ``einc::named_view``, which resolves
    the names at every run (a view with the traced sizes, h=4 fixed and d read from an
    operand, would raise view's error at sizes that do not split, "shape '[2, 3, 4, 5]' is
    invalid", or einsum's on the resolved letters): there the traced call raises the eager
    ShapeError's text, naming the axis (TorchScript reports an op's error as a RuntimeError
    with its text), and at sizes that split it gives eager's answer, with gradients.  Under
    torch.compile and torch.fx the same call raises eager's ShapeError itself."""
    split = "b (h d) -> b h d"
    calls = {EQ: lambda x, w: einc.einsum(EQ, x, w, h=4), split: lambda x: einc.einsum(split, x, h=4)}
    traced_at = {EQ: ((2, 3, 20), (4, 5, 6)), split: ((2, 20),)}
    good = {EQ: [((2, 3, 24), (4, 6, 6)), ((5, 1, 8), (4, 2, 3))], split: [((3, 8),)]}
    bad = {EQ: [((2, 3, 22), (4, 5, 6)), ((2, 3, 20), (8, 5, 6)), ((2, 3, 20), (4, 4, 6))], split: [((2, 30),)]}
    for text, fn in calls.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")     # jit.trace warns that it records the shapes as constants
            traced = torch.jit.trace(fn, tuple(torch.randn(s, dtype=torch.float64) for s in traced_at[text]))
        assert "einc::named_view" in str(traced.graph)
        for shapes in good[text]:
            ops = [torch.randn(s, dtype=torch.float64, requires_grad=True) for s in shapes]
            got, want = traced(*ops), fn(*ops)
            assert_close(got, want, torch.float64)
            assert torch.equal(torch.autograd.grad(got.sum(), ops[0])[0], torch.autograd.grad(want.sum(), ops[0])[0])
        compiled = torch.compile(fn, fullgraph=True, dynamic=True, backend="eager")
        for shapes in bad[text]:
            ops = [torch.randn(s, dtype=torch.float64) for s in shapes]
            eager = _traced_raises_eager_error(fn, traced, ops)
            with pytest.raises(errors.ShapeError) as fx:
                torch.fx.symbolic_trace(fn)(*ops)
            torch._dynamo.reset()
            try:
                with pytest.raises(errors.ShapeError) as dynamo:
                    compiled(*ops)
            finally:
                torch._dynamo.reset()
            assert str(fx.value) == str(dynamo.value) == str(eager)


def _traced_raises_eager_error(fn, traced, ops):
    """The ShapeError ``fn(*ops)`` raises eagerly, once ``traced(*ops)`` (its
    ``torch.jit.trace``) has raised its text: TorchScript reports an op's error as a
    RuntimeError holding ``ShapeError: <text>``."""
    with pytest.raises(errors.ShapeError) as eager:
        fn(*ops)
    with pytest.raises(RuntimeError) as info:
        traced(*ops)
    assert f"ShapeError: {eager.value}" in str(info.value)
    return eager.value


@pytest.mark.parametrize("text, sizes, traced_at, good, bad", [
    ("b h d, b h d -> b (h d)", {}, ((2, 3, 4), (2, 3, 4)), ((1, 5, 2), (1, 5, 2)), ((2, 3, 4), (2, 5, 4))),
    ("b h d -> b (h d)", {"h": 3}, ((2, 3, 4),), ((5, 3, 1),), ((2, 5, 4),)),
], ids=["two-operands", "keyword"])
def test_a_traced_named_merge_raises_the_eager_error(text, sizes, traced_at, good, bad):
    """A named call that merges but splits nothing records its first operand as an
    ``einc::named_view`` (viewed as it is) under ``torch.jit.trace``, which resolves the names
    at every run: at sizes the names refuse the traced call raises eager's ShapeError text
    (TorchScript: a RuntimeError with it), not einsum's error on the resolved letters (two
    sizes of h) nor no error at all (h=3 given, h of 5 in the operand); at sizes that fit it
    gives eager's answer."""
    def fn(*ops):
        return einc.einsum(text, *ops, **sizes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # jit.trace warns that it records the shapes as constants
        traced = torch.jit.trace(fn, tuple(torch.randn(s, dtype=torch.float64) for s in traced_at))
    assert "einc::named_view" in str(traced.graph)
    ops = [torch.randn(s, dtype=torch.float64) for s in good]
    assert torch.equal(traced(*ops), fn(*ops))
    _traced_raises_eager_error(fn, traced, [torch.randn(s, dtype=torch.float64) for s in bad])


def test_a_composite_moved_whole_needs_no_sizes():
    """(b h) that appears only as (b h), on every side, is never separated: no size is needed."""
    y = torch.randn(6, 4, 5, dtype=torch.float64)
    assert torch.equal(einc.einsum("(b h) q k -> (b h) k q", y), y.transpose(1, 2))
    assert torch.allclose(einc.einsum("(b h) q k -> q k", y), y.sum(0))
    assert torch.allclose(einc.einsum("(b h) q k, (b h) k -> (b h) q", y, torch.ones(6, 5, dtype=torch.float64)),
                          y.sum(-1))
    with pytest.raises(errors.ShapeError, match="nothing gives the size of b and h"):
        einc.einsum("(b h) q k -> b (h q) k", y)        # separated on the output: the sizes are needed
    assert torch.equal(einc.einsum("(b h) q k -> b (h q) k", y, b=2), y.reshape(2, 12, 5))
    x = torch.arange(24.0)
    assert torch.equal(einc.einsum("(a b d) -> d", x, d=3), x.reshape(8, 3).sum(0))     # a b together: any split
    for eq in ("(a d b) -> d", "(a d b), d -> "):       # d between a and b: each split sums other elements
        with pytest.raises(errors.ShapeError, match="nothing gives the size of a and b"):
            einc.einsum(eq, x, *([torch.ones(3)] if "," in eq else []), d=3)


def test_a_size_keyword_is_checked_on_every_call():
    """A cached call must not let h=2.0 through where h=2 was seen (2.0 == 2 as a key)."""
    x = torch.randn(2, 6)
    assert einc.einsum("b (h d) -> b h d", x, h=2).shape == (2, 2, 3)
    with pytest.raises(errors.ArgumentError, match="the size h=2.0 must be an int"):
        einc.einsum("b (h d) -> b h d", x, h=2.0)
    assert einc.einsum("b (h d) -> b h d", x, h=torch.tensor(2)).shape == (2, 2, 3)


@pytest.mark.parametrize("value", [True, torch.tensor(True)], ids=["bool", "bool-tensor"])
def test_a_boolean_is_no_size(value):
    """operator.index takes True as 1: a boolean is refused as a size, not planned as h=1."""
    with pytest.raises(einc.errors.ArgumentError, match="must be an int"):
        einc.einsum("b (h d) -> b h d", torch.randn(2, 6), h=value)
    with pytest.raises(einc.errors.OperandTypeError, match="whole numbers"):
        einc.explain("ij->", (value, 3))
