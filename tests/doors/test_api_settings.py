"""torch.backends.opt_einsum's settings change einc's default as they change
torch.einsum's, unless optimize= is passed; a PathOptimizer under
torch.compile(fullgraph=True) raises einc's message."""

from __future__ import annotations

import contextlib
import inspect
import subprocess
import sys

import pytest
import torch
from oracle import reference

import einc
from einc.errors import PathError
from einc.planner.equation import parse
from einc.planner.options import DEFAULT, Options
from einc.runtime import engine

OE = torch.backends.opt_einsum
EQ = "ij,jk,kl->il"
SHAPES = [(30, 2), (2, 30), (30, 30)]       # einc's default path is (1, 2) first; left to right differs


def _ops():
    g = torch.Generator().manual_seed(0)
    return [torch.randn(*s, generator=g, dtype=torch.float64) for s in SHAPES]


@contextlib.contextmanager
def settings(**values):
    """Assign torch.backends.opt_einsum attributes (as users write them), restored after."""
    own = vars(OE)
    saved = {k: own[k] for k in values if k in own}
    try:
        for k, v in values.items():
            setattr(OE, k, v)
        yield
    finally:
        for k in values:
            if k in saved:
                own[k] = saved[k]
            else:
                own.pop(k, None)


def _ran_with(ops, options) -> bool:
    """Whether einsum's last calls built a plan under ``options`` for these operands (their
    shape's, or their size class's: both keyed by the options)."""
    return engine._plans.peek(engine._key(parse(EQ), ops, options)) is not None


def test_defaults_keep_einc_default():
    einc.cache_clear()
    ops = _ops()
    assert (OE.enabled, OE.strategy) == (True, "auto")
    torch.testing.assert_close(einc.einsum(EQ, *ops), reference(EQ, *ops))
    assert _ran_with(ops, DEFAULT)
    assert einc.explain(EQ, *SHAPES).path == ((1, 2), (0, 1))


def test_keywords_at_their_defaults_are_the_call_without_keywords():
    """einsum takes its keywords out of the call's own dict: its signature still names them,
    and a call passing each at its default is the call without any (the same key)."""
    params = inspect.signature(einc.einsum).parameters
    assert list(params) == ["args", "optimize", "memory_limit", "select", "out", "backend", "layout", "sizes"]
    assert {params[k].kind for k in list(params)[1:-1]} == {inspect.Parameter.KEYWORD_ONLY}
    assert params["optimize"].default == "auto" and params["layout"].default is None
    einc.cache_clear()
    ops = _ops()
    einc.einsum(EQ, *ops, memory_limit=None, select=None, out=None, backend=None, layout=None)
    torch.testing.assert_close(einc.einsum(EQ, *ops), reference(EQ, *ops))
    assert _ran_with(ops, DEFAULT) and einc.cache_info().plans[:2] == (1, 1)      # (hits, misses)


@pytest.mark.parametrize("n", [4, 5, 6])
def test_left_to_right_is_left_to_right_for_any_number_of_operands(n):
    """optimize=False (and torch's opt_einsum switched off) is ((A B) C) D ...: each step
    takes the next operand and the last result, never an outer product of later ones."""
    letters = "abcdefgh"
    eq = ",".join(letters[k:k + 2] for k in range(n)) + f"->a{letters[n]}"
    shapes = [(8, 8)] * n
    info = einc.explain(eq, *shapes, optimize=False)
    assert [info.describe(step).split("->")[0].split(",")[0] for step in info.steps[1:]] == \
        [letters[k:k + 2] for k in range(2, n)]        # operand k joins at step k - 1
    assert info.largest_intermediate == 64
    with settings(enabled=False):
        assert einc.explain(eq, *shapes).path == info.path
    ops = [torch.randn(s, dtype=torch.float64) for s in shapes]
    torch.testing.assert_close(einc.einsum(eq, *ops, optimize=False), reference(eq, *ops))


def test_enabled_false_contracts_left_to_right_as_torch_does():
    einc.cache_clear()
    ops = _ops()
    try:
        with settings(enabled=False):
            torch.testing.assert_close(einc.einsum(EQ, *ops), reference(EQ, *ops))
            assert _ran_with(ops, Options.of(False)) and not _ran_with(ops, DEFAULT)
            assert einc.explain(EQ, *SHAPES).path == ((0, 1), (0, 1))
            assert einc.contract_path(EQ, *SHAPES)[0] == [(0, 1, 2)]    # (as opt_einsum writes optimize=False's)
            assert einc.contract_expression(EQ, *SHAPES).plan.path == ((0, 1), (0, 1))
            assert einc.contract(EQ, *ops).shape == (30, 30)
            # optimize= passed: einc's own choice stands, also an explicit "auto"
            einc.einsum(EQ, *ops, optimize="auto")
            assert _ran_with(ops, DEFAULT)
            assert einc.explain(EQ, *SHAPES, optimize="greedy").path != ((0, 1), (0, 1))
        # the change back is noticed by the next call
        einc.cache_clear()
        einc.einsum(EQ, *ops)
        assert _ran_with(ops, DEFAULT) and not _ran_with(ops, Options.of(False))
    finally:
        assert OE.enabled is True


def test_flags_context_manager_and_strategy():
    einc.cache_clear()
    ops = _ops()
    with OE.flags(strategy="greedy"):
        assert OE.strategy == "greedy"
        einc.einsum(EQ, *ops)
        assert _ran_with(ops, Options.of("greedy")) and not _ran_with(ops, DEFAULT)
        assert einc.explain(EQ, *SHAPES).optimizer == "greedy"
    with OE.flags(enabled=False):
        einc.einsum(EQ, *ops)
        assert _ran_with(ops, Options.of(False))
    with settings(strategy="optimal"):
        assert einc.explain(EQ, *SHAPES).optimizer == "optimal"
        einc.einsum(EQ, *ops, memory_limit="max_input")        # memory_limit alone keeps the setting
        assert _ran_with(ops, Options.of("optimal", "max_input"))
    assert OE.strategy == "auto"


def test_an_explicit_auto_strategy_is_torch_default_so_einc_default_stands():
    einc.cache_clear()
    ops = _ops()
    with settings(strategy="auto", enabled=True):
        einc.einsum(EQ, *ops)
        assert _ran_with(ops, DEFAULT)


def test_a_strategy_torch_would_not_accept_names_the_setting():
    ops = _ops()
    expected = reference(EQ, *ops)
    with settings(strategy="bogus"):        # assignment bypasses torch's own check
        with pytest.raises(PathError, match="torch.backends.opt_einsum.strategy is 'bogus'"):
            einc.einsum(EQ, *ops)
        with pytest.raises(KeyError):       # torch.einsum fails too, in opt_einsum
            torch.einsum(EQ, *ops)
        torch.testing.assert_close(einc.einsum(EQ, *ops, optimize="dp"), expected)
    with settings(strategy="dp"):           # any opt_einsum name reaches opt_einsum, as in torch.einsum
        assert einc.explain(EQ, *SHAPES).optimizer == "dp"
        torch.testing.assert_close(torch.einsum(EQ, *ops), expected)


def test_enabled_false_under_torch_compile():
    from torch._dynamo.testing import CompileCounterWithBackend
    ops = [o.float() for o in _ops()]
    try:
        for enabled, expected in ((False, "false"), (True, "auto")):
            torch._dynamo.reset()
            counter = CompileCounterWithBackend("eager")
            with settings(enabled=enabled):
                result = torch.compile(lambda *x: einc.einsum(EQ, *x), backend=counter, fullgraph=True)(*ops)
            torch.testing.assert_close(result, torch.einsum(EQ, *ops))
            calls = [n.args for gm in counter.graphs for n in gm.graph.nodes
                     if n.op == "call_function" and "einc" in str(n.target)]
            assert [c[2] for c in calls] == [expected]
    finally:
        torch._dynamo.reset()


def test_path_optimizer_under_fullgraph_raises_einc_message():
    opt_einsum = pytest.importorskip("opt_einsum")
    optimizer = opt_einsum.RandomGreedy(max_repeats=2)
    ops = [o.float() for o in _ops()]

    def f(a, b, c):
        return einc.einsum(EQ, a, b, c, optimize=optimizer) * 2
    try:
        torch._dynamo.reset()
        with pytest.raises(einc.errors.PathError) as info:
            torch.compile(f, fullgraph=True, backend="eager")(*ops)
        text = str(info.value)
        assert text.startswith("einsum(): under torch.compile, optimize= cannot be a RandomGreedy object"), text[:300]
        assert "einc.contract_path" in text and "Observed exception" not in text
        torch._dynamo.reset()       # without fullgraph the frame runs eagerly, as before
        torch.testing.assert_close(torch.compile(f, backend="eager")(*ops), 2 * torch.einsum(EQ, *ops))
    finally:
        torch._dynamo.reset()


@pytest.mark.parametrize("patched", [False, True])
def test_path_optimizer_under_fx_raises_einc_message(patched, monkeypatch):
    """No fx node holds an optimizer object: einc's PathError, not fx's NotImplementedError;
    a tensor subclass's handler still gets the object (eager takes it)."""
    opt_einsum = pytest.importorskip("opt_einsum")
    optimizer, ops = opt_einsum.RandomGreedy(max_repeats=2), [o.float() for o in _ops()]
    if patched:
        monkeypatch.setattr(torch, "einsum", einc.einsum)

    def f(a, b, c):
        return (torch.einsum if patched else einc.einsum)(EQ, a, b, c, optimize=optimizer)
    with pytest.raises(einc.errors.PathError) as info:
        torch.fx.symbolic_trace(f)
    text = str(info.value)
    assert text.startswith("einsum(): under torch.fx, optimize= cannot be a RandomGreedy object: no graph node "
                           "holds one. Find the path outside the traced function"), text
    seen = []

    class Seen(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            seen.append((kwargs or {}).get("optimize"))
            return super().__torch_function__(func, types, args, kwargs)
    got = einc.einsum(EQ, ops[0].as_subclass(Seen), ops[1], ops[2], optimize=optimizer)
    assert seen[0] is optimizer
    torch.testing.assert_close(got.as_subclass(torch.Tensor), torch.einsum(EQ, *ops))


def test_out_errors_under_fullgraph_are_einc_messages():
    ops = [o.float() for o in _ops()]

    def f(a, b, c, out):
        return einc.einsum(EQ, a, b, c, out=out)
    try:
        out = torch.empty(30, 30)
        torch._dynamo.reset()
        assert torch.compile(f, fullgraph=True, backend="eager")(*ops, out) is out
        torch.testing.assert_close(out, torch.einsum(EQ, *ops))
        for bad, start in ((torch.zeros(2, 30), "einsum(): out= has shape (2, 30)"),
                           (torch.zeros(30, 30, dtype=torch.float64),
                            "einsum(): Expected out tensor to have dtype torch.float32")):
            torch._dynamo.reset()
            with pytest.raises(einc.errors.OutError) as info:
                torch.compile(f, fullgraph=True, backend="eager")(*ops, bad)
            assert str(info.value).startswith(start), str(info.value)[:300]
            assert not bad.any()
            torch._dynamo.reset()   # without fullgraph: the frame runs eagerly and raises einc's error
            with pytest.raises(einc.errors.OutError):
                torch.compile(f, backend="eager")(*ops, bad)
        torch._dynamo.reset()
        grad_ops = [o.clone().requires_grad_(True) for o in ops]
        with pytest.raises(einc.errors.OutError, match="don't support automatic differentiation"):
            torch.compile(f, fullgraph=True, backend="eager")(*grad_ops, out)
    finally:
        torch._dynamo.reset()


@pytest.mark.parametrize("name", ["EINC_SELECT", "EINC_SLICE_OVERHEAD", "EINC_NEW_SHAPES", "EINC_LAYOUT",
                                  "EINC_COPY_COMPILE", "EINC_HUGE_PAGES", "EINC_COMPILE_THREADS"])
def test_explain_refuses_a_bad_setting_as_einsum_does(monkeypatch, name):
    """explain plans a key as einsum does, so a bad value of a setting planning reads is
    refused by both (explain printed a plan for a call einsum refuses); so is one a plan's
    run reads only on a large CPU copy or block or a kernel's first launch (EINC_COPY_COMPILE=maybe
    passed a small call and raised deep in the first call that made a large copy)."""
    from einc.errors import ConfigError
    a, b, c = torch.randn(4, 3), torch.randn(3, 5), torch.randn(5, 2)
    einc.cache_clear()
    monkeypatch.setenv(name, "bogus")
    with pytest.raises(ConfigError, match=name):
        einc.einsum("ij,jk,kl->il", a, b, c)
    with pytest.raises(ConfigError, match=name):
        einc.explain("ij,jk,kl->il", a, b, c)
    with pytest.raises(ConfigError, match=name):
        einc.explain("ij,jk,kl->il", (4, 3), (3, 5), (5, 2))


def test_an_eager_call_does_not_import_dynamo_or_sympy():
    # torch.compile imports dynamo (seconds on a small machine), and symbolic shapes sympy
    # (about a second): an eager einsum must import neither where torch did not
    code = ("import sys, torch\n"
            "before = {'torch._dynamo', 'sympy'} & set(sys.modules)\n"
            "import einc\n"
            "x = torch.ones(2, 3)\n"
            "einc.einsum('ij,jk->ik', x, x.T); einc.einsum('ij,jk,kl->il', x, x.T, x)\n"
            "einc.contract('ij,jk->ik', x, x.T); einc.explain('ij,jk->ik', x, x.T)\n"
            "print(sorted(({'torch._dynamo', 'sympy'} & set(sys.modules)) - before))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "[]", (out.stdout, out.stderr[-2000:])


def test_settings_follow_every_change_of_the_environment(monkeypatch):
    """Settings are read from the environment's own dict (no Mapping frames; the two a miss
    reads, where unset, in one frame): a value set, changed, blanked or removed through
    os.environ is seen by the next read, and an environment replaced by a plain mapping is
    still read."""
    import os

    from einc import config
    from einc.errors import ConfigError
    monkeypatch.delenv("EINC_NEW_SHAPES", raising=False)
    assert config.new_shapes() == "class"
    monkeypatch.setenv("EINC_NEW_SHAPES", "PLAN")
    assert config.new_shapes() == "plan"
    os.environ["EINC_NEW_SHAPES"] = "torch"
    assert config.new_shapes() == "torch"
    os.environ["EINC_NEW_SHAPES"] = "  "
    assert config.new_shapes() == "class"
    os.environ.update({"EINC_NEW_SHAPES": "bogus"})
    with pytest.raises(ConfigError, match="EINC_NEW_SHAPES"):
        config.new_shapes()
    del os.environ["EINC_NEW_SHAPES"]
    assert config.new_shapes() == "class"
    monkeypatch.delenv("EINC_RECORD", raising=False)      # (both read on a miss: unset, in one frame)
    assert config.record() is None
    os.environ["EINC_RECORD"] = "/tmp/calls.jsonl"
    assert str(config.record()) == "/tmp/calls.jsonl"
    os.environ["EINC_RECORD"] = "calls.jsonl"
    with pytest.raises(ConfigError, match="EINC_RECORD"):
        config.record()
    del os.environ["EINC_RECORD"]
    assert config.record() is None
    monkeypatch.setattr(os, "environ", {"EINC_NEW_SHAPES": "plan", "EINC_RECORD": "/tmp/calls.jsonl"})
    assert config.new_shapes() == "plan" and str(config.record()) == "/tmp/calls.jsonl"


def test_a_new_shape_sees_a_setting_changed_between_calls(monkeypatch):
    """A miss reads EINC_NEW_SHAPES once and acts on it: under ``plan`` a new shape is
    planned per shape (no size class), under ``class`` the next new shape takes its class."""
    from einc.runtime import sizeclass
    einc.cache_clear()
    a, b = torch.randn(2, 5), torch.randn(5, 3)
    monkeypatch.setenv("EINC_NEW_SHAPES", "plan")
    einc.einsum("ij,jk->ik", a, b)
    assert sizeclass._classes.info().currsize == 0
    monkeypatch.setenv("EINC_NEW_SHAPES", "class")
    torch.testing.assert_close(einc.einsum("ij,jk->ik", a[:, :4], b[:4]), a[:, :4] @ b[:4])
    assert sizeclass._classes.info().currsize == 1
