"""A plan's run (runtime/program.py): its first calls run the steps by a loop, later ones
one compiled function; both call the same step functions in the same order with the same
arguments, drop each intermediate after its last use, and scale the result as the plan
says."""

import builtins
import gc
import random
import weakref

import fuzz
import pytest
import torch

import einc
from einc.planner import plan_for
from einc.planner.equation import parse
from einc.planner.options import DEFAULT, Options
from einc.runtime import engine, program

pytestmark = pytest.mark.usefixtures("cleared_caches")


def _counting_compiles(monkeypatch):
    """The sources of plans' run functions compiled from now on."""
    compiled, real = [], builtins.compile

    def counting(source, filename, *args, **kwargs):
        if filename == "<einc plan>":
            compiled.append(source)
        return real(source, filename, *args, **kwargs)
    monkeypatch.setattr(builtins, "compile", counting)
    program._CODE.clear()
    return compiled


def test_a_plan_of_several_steps_runs_by_a_loop_then_compiled_with_the_same_bits(monkeypatch):
    """A new shape's plan compiles no function on its first call (most plans of a first
    training step run a few times); the call that has run it often enough puts the compiled
    function in the entry; both give the same bits, gradients too."""
    compiled = _counting_compiles(monkeypatch)
    monkeypatch.setenv("EINC_NEW_SHAPES", "plan")
    g = torch.Generator().manual_seed(0)
    eq = "ab,bc,cd,de->ae"
    ops = [torch.randn(5, 6, generator=g, requires_grad=True), torch.randn(6, 7, generator=g),
           torch.randn(7, 8, generator=g), torch.randn(8, 3, generator=g)]
    first = einc.einsum(eq, *ops)
    (ga,) = torch.autograd.grad(first.square().sum(), ops[0])
    assert compiled == []
    entry = engine.entry(parse(eq), ops, DEFAULT)
    assert len(entry.plan.steps) == 3
    looped = entry.run
    for _ in range(program.CALLS_BEFORE_CODE):
        out = einc.einsum(eq, *ops)
    assert entry.run is not looped and len(compiled) == 1 and compiled[0].startswith("def run(")
    again = einc.einsum(eq, *ops)
    (ga2,) = torch.autograd.grad(again.square().sum(), ops[0])
    assert torch.equal(first, out) and torch.equal(first, again) and torch.equal(ga, ga2)
    torch.testing.assert_close(first, torch.einsum(eq, *ops))


def test_the_compiled_source_is_written_by_the_call_that_compiles_it(monkeypatch):
    """A plan's run writes its function's source on the call that compiles it, not when
    the plan's run is made: the calls before it loop and need none."""
    written, real = [], program._source
    monkeypatch.setattr(program, "_source", lambda *a: written.append(a) or real(*a))
    compiled = _counting_compiles(monkeypatch)
    plan = plan_for(parse("ab,bc,cd->ad"), [(2, 3), (3, 4), (4, 5)], Options.of(False))
    run = program.unroll(plan, [_torch_step(step) for step in plan.steps])
    g = torch.Generator().manual_seed(1)
    ops = [torch.randn(s, generator=g) for s in ((2, 3), (3, 4), (4, 5))]
    looped = [run(ops) for _ in range(program.CALLS_BEFORE_CODE - 1)]
    assert written == [] and compiled == []
    out = run(ops)
    assert len(written) == 1 and len(compiled) == 1 and compiled[0].count("step") == len(plan.steps)
    assert all(torch.equal(x, out) for x in looped) and torch.equal(run(ops), out) and len(written) == 1


def _torch_step(step):
    """torch.einsum of one step of two operands."""
    letter = "abcdefghijklmnopqrstuvwxyz".__getitem__
    text = ",".join("".join(map(letter, t)) for t in step.inputs) + "->" + "".join(map(letter, step.output))
    return lambda x, y: torch.einsum(text, x, y)


def test_a_run_not_held_by_an_entry_compiles_too_and_answers_alike():
    plan = plan_for(parse("ab,bc,cd->ad"), [(2, 3), (3, 4), (4, 5)], Options.of(False))
    calls = []

    def counted(s, f):
        return lambda x, y: calls.append(s) or f(x, y)
    fns = [counted(s, _torch_step(step)) for s, step in enumerate(plan.steps)]
    run = program.unroll(plan, fns)
    ops = [torch.randn(2, 3), torch.randn(3, 4), torch.randn(4, 5)]
    answers = [run(ops) for _ in range(program.CALLS_BEFORE_CODE + 2)]
    assert all(torch.equal(a, answers[0]) for a in answers)
    assert calls == [0, 1] * (program.CALLS_BEFORE_CODE + 2)


def test_the_loop_drops_each_intermediate_after_its_last_use_and_scales_in_the_last_step():
    """As the compiled function's ``del``: an intermediate is gone when the step after its
    last reader runs; a ``scale`` reaches the last step's ``scale`` keyword."""
    plan = plan_for(parse("ab,bc,cd,de->ae"), [(2, 3), (3, 4), (4, 5), (5, 6)], Options.of(False))
    seen, refs, scales = [], [], []

    def step(x, y):
        out = _torch_step(plan.steps[len(refs) % len(plan.steps)])(x, y)
        refs.append(weakref.ref(out))
        gc.collect()
        seen.append([r() is None for r in refs[:-2]])     # (left to right: step s reads step s - 1's)
        return out

    def last(x, y, scale=None):
        scales.append(scale)
        out = step(x, y)
        return out if scale is None else out * scale
    fns = [step] * (len(plan.steps) - 1) + [last]
    run = program.unroll(plan, fns)
    ops = [torch.randn(2, 3), torch.randn(3, 4), torch.randn(4, 5), torch.randn(5, 6)]
    plain = run(ops)
    assert len(seen) == 3 and all(all(dead) for dead in seen) and seen[-1] == [True], seen
    assert torch.equal(run(ops, 0.5), plain * 0.5) and scales == [None, 0.5]


def test_the_loop_and_the_compiled_function_give_the_same_bits_over_random_equations():
    checked = 0
    for seed in range(200):
        rng = random.Random(seed)
        case = fuzz.make_case(rng, dtypes=fuzz.FLOATS, max_operands=6)
        if len(case.shapes) < 3:
            continue
        ops = fuzz.operands(case, seed)
        eq = parse(case.oracle_equation)
        try:
            entry = engine.entry(eq, ops, DEFAULT)
        except Exception:       # noqa: BLE001 - error parity is the fuzzer's
            continue
        run = entry.run
        if not hasattr(run, "promote"):
            continue
        looped, scaled = run(ops), run(ops, 0.5)
        for _ in range(program.CALLS_BEFORE_CODE):
            run(ops)
        assert entry.run is not run
        assert torch.equal(looped, entry.run(ops)), case.oracle_equation
        assert torch.equal(scaled, entry.run(ops, 0.5)), case.oracle_equation
        checked += 1
    assert checked >= 20, checked
