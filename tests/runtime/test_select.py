"""A backend per step: cuBLAS through torch with no copy, or a generated kernel, chosen by
measurement (here with a fake timer), by the cost model, or forced; decisions remembered
in the cache folder.  Kernels run under Triton's interpreter on this machine."""

import contextlib
import json
import os
import sys
import warnings

import fuzz
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import einc
from einc.planner.equation import parse
from einc.planner.graph import build
from einc.planner.plan import build_plan
from einc.runtime import select
from einc.runtime.torch_executor import blas

pytestmark = pytest.mark.kernels
TIMED = select.REPEATS + 1      # timed runs of a candidate that measure keeps: the first round, then the rounds


def _step(equation, shapes):
    plan = build_plan(build(parse(equation), shapes))
    (step,) = plan.steps
    return step, plan.graph.sizes


def _strides(*shapes):
    return [torch.empty(s).stride() for s in shapes]


# ----------------------------------------------------------------------- which steps are GEMMs

@pytest.mark.parametrize("equation,shapes,layouts,gemm", [
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)], ("plain", "plain"), True),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)], ("column-major", "plain"), True),      # A's rows unit-stride
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)], ("transposed", "plain"), False),       # batch stride 1: no
    ("ij,jk->ki", [(3, 4), (4, 5)], ("plain", "plain"), True),                      # C = (B^T A^T)
    ("abcd,cde->abe", [(2, 3, 4, 5), (4, 5, 6)], ("plain", "plain"), True),         # k merges (c, d)
    ("abcd,dce->abe", [(2, 3, 4, 5), (5, 4, 6)], ("plain", "plain"), False),        # k orders differ
    ("bqhd,bkhd->bhqk", [(2, 5, 3, 4), (2, 6, 3, 4)], ("plain", "plain"), False),  # batch (b, h) splits
    ("ibnd,jbnd->ijbn", [(3, 2, 2, 4), (5, 2, 2, 4)], ("plain", "plain"), False),  # batch last in C
    ("iij,jk->ik", [(3, 3, 4), (4, 5)], ("plain", "plain"), False),                 # a diagonal
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)], ("sliced", "plain"), False),           # no unit stride
])
def test_classify_and_run_matches_torch(equation, shapes, layouts, gemm):
    ops = [fuzz.lay_out(torch.randn(s, dtype=torch.float64), lay) if lay != "column-major" else
           torch.randn(s, dtype=torch.float64).transpose(-1, -2).contiguous().transpose(-1, -2)
           for s, lay in zip(shapes, layouts)]
    plan = build_plan(build(parse(equation), shapes))
    step = plan.steps[-1]
    found, why = blas.classify(step, plan.graph.sizes, ops[0].stride(), ops[1].stride())
    assert (found is not None) == gemm, why
    if gemm:
        fn = blas.step_function(step, plan.graph.sizes, ops[0].stride(), ops[1].stride(), fallback=None)
        out = fn(*ops)
        assert out.is_contiguous()
        torch.testing.assert_close(out, torch.einsum(equation, *ops))
    else:
        assert why


def test_other_strides_at_call_time_are_classified_again_or_fall_back():
    step, sizes = _step("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)])
    calls = []

    def fallback(a, b):
        calls.append(1)
        return torch.einsum("bij,bjk->bik", a, b)
    fn = blas.step_function(step, sizes, *_strides((2, 3, 4), (2, 4, 5)), fallback)
    a, b = torch.randn(2, 3, 4, dtype=torch.float64), torch.randn(2, 4, 5, dtype=torch.float64)
    torch.testing.assert_close(fn(a.transpose(1, 2).contiguous().transpose(1, 2), b), a @ b)   # still a GEMM
    assert not calls
    sliced = torch.zeros(2, 3, 8, dtype=torch.float64)[:, :, ::2]
    sliced.copy_(a)
    torch.testing.assert_close(fn(sliced, b), a @ b)                 # no GEMM on these strides: fallback
    assert calls == [1]


def test_a_step_function_keeps_a_bounded_number_of_stride_patterns():
    """A caller cycling through many strides (windows of a padded batch) gets right values
    from each, and the step keeps at most MAX_PATTERNS worked out."""
    step, sizes = _step("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)])
    fn = blas.step_function(step, sizes, *_strides((2, 3, 4), (2, 4, 5)), fallback=None)
    b = torch.randn(2, 4, 5, dtype=torch.float64)
    for pad in range(blas.MAX_PATTERNS + 6):
        a = torch.randn(2, 3, 4 + pad, dtype=torch.float64)[:, :, :4]    # rows 4 + pad apart
        torch.testing.assert_close(fn(a, b), a @ b)
    known = fn.__closure__[fn.__code__.co_freevars.index("known")].cell_contents
    assert 1 <= len(known) <= blas.MAX_PATTERNS


GEMMS = ["ij,jk->ik", "ij,jk->ki", "ik,jk->ij", "bij,bjk->bik", "bij,bjk->bki", "bji,bkj->bik", "abk,kc->abc",
         "kb,bak->a", "i,i->", "bi,bj->bij"]


@fuzz.profile(60, 0.01)
@given(equation=st.sampled_from(GEMMS), data=st.data())
def test_gemm_steps_in_every_layout_size_and_dtype(equation, data):
    """A step that classifies as a GEMM gives torch.einsum's values, contiguous, in the
    operands' dtype, operands untouched: every layout, sizes 0 to 3 (0 and 1 are the
    special strides), each float dtype."""
    terms, out = equation.split("->")
    labels = sorted(set(terms.replace(",", "")))
    sizes = dict(zip(labels, data.draw(st.lists(st.integers(0, 3), min_size=len(labels), max_size=len(labels)))))
    dtype = data.draw(st.sampled_from([torch.float64, torch.float32, torch.bfloat16, torch.float16]))
    shapes = [tuple(sizes[c] for c in t) for t in terms.split(",")]
    ops = [fuzz.lay_out(torch.randn(s, dtype=torch.float64), data.draw(st.sampled_from(fuzz.LAYOUTS))).to(dtype)
           if s else torch.randn(s, dtype=torch.float64).to(dtype) for s in shapes]
    before = [o.clone() for o in ops]
    plan = build_plan(build(parse(equation), shapes))
    step = plan.steps[-1]
    fn = blas.step_function(step, plan.graph.sizes, ops[0].stride(), ops[1].stride(), fallback=None)
    if fn is None:
        return
    got = fn(*ops)
    want = torch.einsum(equation, *[o.double() for o in ops])
    assert got.shape == want.shape and got.dtype == dtype and got.is_contiguous()
    tol = {torch.float64: 1e-12, torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 2e-3}[dtype]
    torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol)
    assert all(torch.equal(o, b) for o, b in zip(ops, before))


# ----------------------------------------------------------------------- choosing per step

@pytest.fixture
def timed(kernel_device, monkeypatch, tmp_path):
    """Kernels possible (interpreter on CPU), a fake timer that says cuBLAS takes 1 µs and a
    kernel 5 µs, a cache folder of the test's own."""
    monkeypatch.setenv("EINC_CACHE_DIR", str(tmp_path))
    seen = []

    def fake(fn, args):
        seen.append(fn)
        fn(*args)
        return 5.0 if getattr(fn, "__name__", "") == "launch" else 1.0
    monkeypatch.setattr(select, "timer", fake)
    einc.cache_clear()
    yield kernel_device, seen, tmp_path
    einc.cache_clear()


def test_measure_keeps_the_faster_and_remembers_it(timed):
    device, seen, folder = timed
    a, b = torch.randn(2, 3, 4, device=device), torch.randn(2, 4, 5, device=device)
    torch.testing.assert_close(einc.einsum("bij,bjk->bik", a, b, select="measure"), a @ b)
    info = einc.explain("bij,bjk->bik", a, b, select="measure")
    assert info.backends == ("blas bmm/mm",) and "measured" in info.reasons[0] and "triton 5 µs" in info.reasons[0]
    assert len(seen) == 2 * TIMED                                    # both candidates, TIMED runs each
    saved = json.loads((folder / "decisions.json").read_text())["steps"]
    ((key, decision),) = saved.items()
    assert decision == {"backend": "blas", "us": {"triton": 5.0, "blas": 1.0}} and "torch " in key
    torch.testing.assert_close(einc.einsum("bij,bjk->bik", a, b, select="measure"), a @ b)
    assert len(seen) == 2 * TIMED                           # the cached entry: no timing
    einc.cache_clear()                                               # as a new process
    seen.clear()
    torch.testing.assert_close(einc.einsum("bij,bjk->bik", a, b, select="measure"), a @ b)
    assert not seen                                                  # the decision came from the file
    assert "decisions.json" in einc.explain("bij,bjk->bik", a, b, select="measure").reasons[0]


@pytest.mark.parametrize("damaged", ["{not json", '{"format": 1, "steps": []}', '{"format": 1, "steps": 5}',
                                     '{"format": 3, "steps": {}}', '[1, 2]'])
def test_a_damaged_decisions_file_is_ignored_with_one_warning(timed, damaged):
    device, seen, folder = timed
    (folder / "decisions.json").write_text(damaged)
    a, b = torch.randn(3, 4, device=device), torch.randn(4, 5, device=device)
    with pytest.warns(RuntimeWarning, match="ignoring the backend decisions file") as got:
        torch.testing.assert_close(einc.einsum("ij,jk->ik", a, b, select="measure"), a @ b)
    assert [w.filename for w in got] == [__file__]          # the caller's line, not einc's
    assert len(seen) == 2 * TIMED                           # timed afresh
    with warnings.catch_warnings():
        warnings.simplefilter("error")                      # no second warning, nor a kernel given up
        einc.einsum("ij,jk,kl->il", a, b, b.T, select="measure")
    assert einc.explain("ij,jk->ik", a, b, select="measure").backends[0] != "torch"
    assert json.loads((folder / "decisions.json").read_text())["format"] == select.FORMAT    # rewritten, valid


@pytest.mark.parametrize("kind", ["fifo", "link to /dev/zero", "folder"])
def test_a_decisions_file_that_is_no_regular_file_is_ignored(timed, kind):
    """Read as every cache file is: a FIFO blocked the first call for good, a link to
    /dev/zero read without end (and held the decisions' lock meanwhile)."""
    device, seen, folder = timed
    path = folder / "decisions.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    else:
        path.symlink_to("/dev/zero")
    a, b = torch.randn(3, 4, device=device), torch.randn(4, 5, device=device)
    with pytest.warns(RuntimeWarning, match="ignoring the backend decisions file .*not a regular file"):
        torch.testing.assert_close(einc.einsum("ij,jk->ik", a, b, select="measure"), a @ b)
    assert len(seen) == 2 * TIMED                           # timed afresh
    if kind != "folder":                                    # (a folder cannot be replaced by the file)
        assert not path.is_symlink() and json.loads(path.read_text())["format"] == select.FORMAT


def test_an_older_decisions_file_is_replaced_without_a_warning(timed):
    """A format-1 file (its keys lack einc's version and the kernels: stale) is ignored
    quietly, the step timed afresh, and the file rewritten in the current format."""
    device, seen, folder = timed
    (folder / "decisions.json").write_text(json.dumps({"format": 1, "steps": {"a|b": {"backend": "blas", "us": {}}}}))
    a, b = torch.randn(3, 4, device=device), torch.randn(4, 5, device=device)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.testing.assert_close(einc.einsum("ij,jk->ik", a, b, select="measure"), a @ b)
    assert len(seen) == 2 * TIMED
    saved = json.loads((folder / "decisions.json").read_text())
    assert saved["format"] == select.FORMAT and list(saved["steps"]) != ["a|b"] and len(saved["steps"]) == 1


def test_tuning_times_a_remembered_step_afresh_and_lists_what_it_kept(timed):
    """Under ``select.tuning`` (``einc tune``) a decision on disk is not taken: the step is
    timed again, in the rounds asked for, and the key and the decision kept are listed (a
    second entry meeting the same step takes the one kept under it, untimed)."""
    device, seen, folder = timed
    a, b = torch.randn(2, 3, 4, device=device), torch.randn(2, 4, 5, device=device)
    einc.einsum("bij,bjk->bik", a, b, select="measure")
    einc.cache_clear()
    seen.clear()
    with select.tuning(repeats=2) as held:
        torch.testing.assert_close(einc.einsum("bij,bjk->bik", a, b, select="measure"), a @ b)
        assert len(seen) == 2 * (1 + 2)                             # both candidates, a first round and 2
        (key,) = held.asked
        assert held.decided[key].backend == "blas" and set(held.decided[key].timings) == {"blas", "triton"}
        part = select.step_of(key)
        assert (part["step"], part["layout"], part["dtype"]) == \
            ("abc,acd->abd", "(2, 3, 4):(12, 4, 1);(2, 4, 5):(20, 5, 1)", "torch.float32")
        assert [k[:8] for k in part["kernels"]] == ["einc_mm_"]
        einc.cache_clear()
        seen.clear()
        torch.testing.assert_close(einc.einsum("bij,bjk->bik", a, b, select="measure"), a @ b)
        assert not seen and held.asked == [key, key]                 # kept under tuning: not timed twice
    einc.cache_clear()
    assert select.remembered(key).backend == "blas"                 # and on disk, as always


def test_a_decisions_key_holds_the_versions_and_the_kernels_source_hash(timed, monkeypatch):
    """The key of a step holds einc's, torch's and triton's versions and the names of its
    kernel candidates (each ends in a hash of the kernel's source): a decision stored under
    another einc or another kernel source is not taken, the step is timed again."""
    device, seen, folder = timed
    a, b = torch.randn(2, 3, 4, device=device), torch.randn(2, 4, 5, device=device)
    einc.einsum("bij,bjk->bik", a, b, select="measure")
    ((key, decision),) = json.loads((folder / "decisions.json").read_text())["steps"].items()
    (kernel,) = einc.explain("bij,bjk->bik", a, b, select="kernel").backends
    assert f"einc {einc.__version__}|" in key and f"torch {torch.__version__}|" in key
    assert key.endswith("|" + kernel.removeprefix("triton "))
    for stale in (key.replace(f"einc {einc.__version__}|", "einc 0.0.0-older|"), key[:-8] + "00000000"):
        (folder / "decisions.json").write_text(json.dumps({"format": select.FORMAT, "steps": {stale: decision}}))
        einc.cache_clear()                                           # as a new process
        seen.clear()
        torch.testing.assert_close(einc.einsum("bij,bjk->bik", a, b, select="measure"), a @ b)
        assert len(seen) == 2 * TIMED, stale                         # not taken: timed again
    monkeypatch.setattr(einc, "__version__", "0.0.0-newer")
    assert select.signature(einc.explain("bij,bjk->bik", a, b).plan.steps[0], a.device, (a, b)) != \
        key.rsplit("|", 1)[0] + "|"


@pytest.mark.parametrize("timings", ['5', '"xy"', '[1, 2]', 'null'])
def test_a_decision_with_damaged_timings_is_still_taken(timed, timings):
    device, seen, folder = timed
    a, b = torch.randn(2, 3, 4, device=device), torch.randn(2, 4, 5, device=device)
    einc.einsum("bij,bjk->bik", a, b, select="measure")
    saved = json.loads((folder / "decisions.json").read_text())
    ((key, decision),) = saved["steps"].items()
    (folder / "decisions.json").write_text(json.dumps(saved).replace(json.dumps(decision["us"]), timings))
    einc.cache_clear()                                      # as a new process
    seen.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.testing.assert_close(einc.einsum("bij,bjk->bik", a, b, select="measure"), a @ b)
    assert not seen and einc.explain("bij,bjk->bik", a, b, select="measure").backends == ("blas bmm/mm",)


def test_model_blas_and_kernel_modes(timed):
    device, seen, _ = timed
    a, b = torch.randn(2, 3, 4, device=device), torch.randn(2, 4, 5, device=device)
    q, k = torch.randn(2, 5, 3, 4, device=device), torch.randn(2, 6, 3, 4, device=device)
    for mode, gemm, layout in [("model", "blas", "triton"), ("blas", "blas", "torch"), ("kernel", "triton", "triton")]:
        torch.testing.assert_close(einc.einsum("bij,bjk->bik", a, b, select=mode), a @ b)
        torch.testing.assert_close(einc.einsum("bqhd,bkhd->bhqk", q, k, select=mode),
                                   torch.einsum("bqhd,bkhd->bhqk", q, k))
        assert einc.explain("bij,bjk->bik", a, b, select=mode).backends[0].split()[0] == gemm, mode
        assert einc.explain("bqhd,bkhd->bhqk", q, k, select=mode).backends[0].split()[0] == layout, mode
    assert not seen                                                  # none of these modes times


def test_the_environment_variable_selects_too(timed, monkeypatch):
    device, seen, _ = timed
    monkeypatch.setenv("EINC_SELECT", "blas")
    a, b = torch.randn(3, 4, device=device), torch.randn(4, 5, device=device)
    einc.einsum("ij,jk->ik", a, b)
    assert einc.explain("ij,jk->ik", a, b).backends == ("blas bmm/mm",)
    monkeypatch.setenv("EINC_SELECT", "sometimes")
    einc.cache_clear()
    with pytest.raises(einc.errors.ConfigError, match="EINC_SELECT='sometimes'"):
        einc.einsum("ij,jk->ik", a, b)
    with pytest.raises(ValueError, match="select must be one of"):
        einc.einsum("ij,jk->ik", a, b, select="fastest")


@pytest.mark.parametrize("mode", ["model", "blas"])
@fuzz.profile(quick=40, share=0.05)
@given(case=fuzz.cases(dtypes=[torch.float32, torch.float64], max_operands=4), seed=st.integers(0, 2**16))
def test_mixed_plans_match_torch(kernel_device, mode, case, seed):
    """Random calls with steps on cuBLAS views, generated kernels and torch ops mixed."""
    from tests.fuzz.test_fuzz import _differential
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="einc:")
        _differential(case, fuzz.operands(case, seed, kernel_device),
                      lambda c, ops: einc.einsum(*c.args(ops), select=mode))


def test_measure_times_the_copy_cost_models_layout_as_a_third_candidate(timed, monkeypatch):
    """Where the step is a copy-free cuBLAS product and the torch executor's layout copies
    (here forced: the costliest layout), that TTGT step is timed too; the fastest wins and
    is remembered under its name."""
    from einc.runtime.torch_executor import ttgt
    device, seen, folder = timed
    monkeypatch.setattr(ttgt, "pick", lambda found: max(found, key=lambda lay: lay.cost))

    def fake(fn, args):
        seen.append(fn)
        fn(*args)
        if getattr(fn, "__name__", "") == "launch":
            return 5.0
        return 0.5 if getattr(fn, "ttgt", None) is not None else 1.0
    monkeypatch.setattr(select, "timer", fake)
    a, b = torch.randn(2, 3, 4, device=device), torch.randn(2, 4, 5, device=device)
    torch.testing.assert_close(einc.einsum("bij,bjk->bik", a, b, select="measure"), a @ b)
    assert len(seen) == 3 * TIMED and sum(getattr(f, "ttgt", None) is not None for f in seen) == TIMED
    ((key, decision),) = json.loads((folder / "decisions.json").read_text())["steps"].items()
    assert decision == {"backend": "torch", "us": {"triton": 5.0, "blas": 1.0, "torch": 0.5}}
    assert einc.explain("bij,bjk->bik", a, b, select="measure").backends == ("torch",)
    torch.testing.assert_close(einc.einsum("bij,bjk->bik", a, b, select="measure"), a @ b)
    assert len(seen) == 3 * TIMED                           # no timing on later calls
    einc.cache_clear()
    seen.clear()
    torch.testing.assert_close(einc.einsum("bij,bjk->bik", a, b, select="measure"), a @ b)
    assert not seen                                                  # the decision came from the file


def test_measure_times_the_last_product_in_chunks_as_a_candidate(timed, monkeypatch):
    """Where the last step's product is copied, permuted, into the result, that step made a
    chunk at a time (``chunked.plan_chunks(...).anywhere``: on CUDA, chunks of half the
    L2) is timed beside the kernel and the torch executor's step; the fastest wins, is
    remembered as ``chunks`` and gives the right answer on every later call."""
    from einc.runtime.torch_executor import chunked
    device, seen, folder = timed
    monkeypatch.setattr(chunked, "MIN_BYTES", 0)
    monkeypatch.setattr(chunked, "CHUNK_BYTES", 64)
    ran = []
    real_plan = chunked.plan_chunks

    def plan_chunks(*args):
        run = real_plan(*args)
        if run is not None:
            anywhere = run.anywhere

            def spied(a, b, whole):
                ran.append(True)
                return anywhere(a, b, whole)
            run.anywhere = spied
        return run
    monkeypatch.setattr(chunked, "plan_chunks", plan_chunks)
    monkeypatch.setattr("einc.runtime.torch_executor.plan_chunks", plan_chunks)

    def fake(fn, args):
        seen.append(fn)
        ran.clear()
        fn(*args)
        return 5.0 if getattr(fn, "__name__", "") == "launch" else 0.5 if ran else 1.0
    monkeypatch.setattr(select, "timer", fake)
    eq = "dega,gfbc->abcdef"
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(2, 3, 4, 5, generator=g).to(device), torch.randn(4, 2, 3, 2, generator=g).to(device)
    expected = torch.einsum(eq, a.double(), b.double())
    for _ in range(2):
        out = einc.einsum(eq, a, b, select="measure")
        assert out.is_contiguous()
        torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-5)
    assert len(seen) == 4 * TIMED                 # kernel, torch step, chunks, plain kernel; then no timing
    ((key, decision),) = json.loads((folder / "decisions.json").read_text())["steps"].items()
    assert decision["backend"] == "chunks" and set(decision["us"]) == {"triton", "torch", "chunks", "plain"}
    assert einc.explain(eq, a, b, select="measure").backends == ("torch in chunks",)
    einc.cache_clear()                                               # as a new process
    seen.clear()
    ran.clear()
    torch.testing.assert_close(einc.einsum(eq, a, b, select="measure").double(), expected, rtol=1e-5, atol=1e-5)
    assert not seen and ran                                          # the file's decision: chunks, untimed


@pytest.mark.parametrize("shapes,move", [([(2, 3, 4, 5), (4, 2, 3, 2)], "t"), ([(2, 3, 2, 5), (2, 2, 3, 2)], "nt")],
                         ids=["T", "2-D N block (write-bound)"])
def test_measure_times_the_plain_kernel_where_the_default_moved_a_stranded_index(timed, monkeypatch, shapes, move):
    """Where the default kernel moved a stranded unit-stride index into the tile's T axis or
    (a write-bound step) a 2-D N block (CCSD(T)'s ``dega,gfbc->abcdef``: B's g), the kernel
    lowered without the move is timed beside it; when it is the fastest it runs, is
    remembered as ``plain``, explain names it, and the answer is right on every call.  A
    step with nothing stranded has no ``plain`` candidate."""
    from einc.runtime import triton_executor
    device, seen, folder = timed
    eq = "dega,gfbc->abcdef"
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(s, generator=g).to(device) for s in shapes)
    plan = einc.explain(eq, a, b, select="kernel").plan
    (lowered,) = triton_executor.kernels(plan, a.dtype, [a.shape, b.shape])
    assert lowered.kernel.group(move)
    (kernel,) = triton_executor.plain_kernels(plan, a.dtype, [a.shape, b.shape]).values()
    plain = triton_executor.launch_of(kernel)
    (default,) = einc.explain(eq, a, b, select="kernel").backends

    def fake(fn, args):
        seen.append(fn)
        fn(*args)
        return 0.5 if fn.__module__ == plain.__module__ else 5.0 if fn.__name__ == "launch" else 1.0
    monkeypatch.setattr(select, "timer", fake)
    expected = torch.einsum(eq, a.double(), b.double())
    for _ in range(2):
        out = einc.einsum(eq, a, b, select="measure")
        assert out.is_contiguous()
        torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-5)
    assert len(seen) == 3 * TIMED                           # kernel, plain kernel, torch step
    ((key, decision),) = json.loads((folder / "decisions.json").read_text())["steps"].items()
    assert decision == {"backend": "plain", "us": {"triton": 5.0, "torch": 1.0, "plain": 0.5}}
    (name,) = einc.explain(eq, a, b, select="measure").backends
    assert name == f"triton {kernel.name}" and name != default and default.startswith("triton ")
    assert not triton_executor.plain_kernels(einc.explain("bij,bjk->bik", (2, 3, 4), (2, 4, 5)).plan,
                                             a.dtype, [(2, 3, 4), (2, 4, 5)])
    einc.cache_clear()                                               # as a new process
    seen.clear()
    torch.testing.assert_close(einc.einsum(eq, a, b, select="measure").double(), expected, rtol=1e-5, atol=1e-5)
    assert not seen                                                  # the file's decision, untimed


@pytest.mark.parametrize("fails", ["to run", "to load"])
def test_a_plain_kernel_that_fails_is_left_out_of_the_measurement(timed, monkeypatch, fails):
    """The plain kernel is an optional candidate: where it fails to load or to run, measure
    mode times the others, with no warning and no fallback of the entry (any other
    candidate's failure still raises from measure); and a new process that remembers a
    decision other than ``plain`` does not load the plain kernel at all."""
    from einc.runtime import triton_executor
    device, seen, folder = timed
    real_plain, real_launch = triton_executor.plain_kernels, triton_executor.launch_of
    names, loaded = set(), []

    def broken(*args):
        raise RuntimeError("out of resource")

    def plain_kernels(*args):
        found = real_plain(*args)
        names.update(k.name for k in found.values())
        return found

    def launch_of(kernel):
        if kernel.name not in names:
            return real_launch(kernel)
        loaded.append(kernel.name)
        if fails == "to load":
            raise SyntaxError("a generator bug")
        return broken
    monkeypatch.setattr(triton_executor, "plain_kernels", plain_kernels)
    monkeypatch.setattr(triton_executor, "launch_of", launch_of)
    eq = "dega,gfbc->abcdef"
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(2, 3, 4, 5, generator=g).to(device), torch.randn(4, 2, 3, 2, generator=g).to(device)
    expected = torch.einsum(eq, a.double(), b.double())
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="einc:")
        out = einc.einsum(eq, a, b, select="measure")
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-5)
    assert names and len(loaded) == 1
    ((key, decision),) = json.loads((folder / "decisions.json").read_text())["steps"].items()
    assert set(decision["us"]) == {"triton", "torch"}
    einc.cache_clear()                                               # as a new process: the file decides
    torch.testing.assert_close(einc.einsum(eq, a, b, select="measure").double(), expected, rtol=1e-5, atol=1e-5)
    assert len(loaded) == 1                                          # the plain kernel was not loaded again
    with pytest.raises(RuntimeError, match="out of resource"):
        select.measure({"triton": broken, "torch": lambda *x: None}, (a, b))


def test_measure_clears_the_cache_before_every_timed_run(monkeypatch):
    """Every timed run follows a clear of the L2 (``cold_cache``); on CPU tensors the
    clear allocates nothing and does nothing."""
    events = []

    @contextlib.contextmanager
    def cold(args):
        events.append("enter")
        yield lambda: events.append("clear")
        events.append("exit")
    monkeypatch.setattr(select, "cold_cache", cold)
    monkeypatch.setattr(select, "timer", lambda fn, args: events.append(fn.__name__) or 1.0)

    def a(*args):
        pass

    def b(*args):
        pass
    select.measure({"a": a, "b": b}, (torch.ones(1),))
    timed = events[1:-1]
    assert events[0] == "enter" and events[-1] == "exit"
    assert timed[:12] == ["clear", "a", "clear", "b"] + ["clear", "a", "clear", "b", "clear", "b", "clear", "a"]
    assert len(timed) == 2 * 2 * TIMED          # the first round, then the rotated rounds
    monkeypatch.undo()
    with select.cold_cache((torch.ones(3), 2.0)) as clear:
        assert clear() is None


@pytest.mark.parametrize("room", [True, False])
def test_the_cache_clear_zeroes_twice_the_l2_or_nothing_on_a_full_device(monkeypatch, room):
    """On a CUDA device (stood in for here) the clear zeroes a buffer of twice its L2 before
    each timed run; where the device has no room for it, timing goes on without it."""
    from unittest import mock
    made, zeroed = [], []

    class Buffer:
        def zero_(self):
            zeroed.append(True)

    def empty(n, dtype, device):
        if not room:
            raise torch.OutOfMemoryError("CUDA out of memory")
        made.append((n, dtype, device))
        return Buffer()
    monkeypatch.setattr(select, "l2_bytes", lambda device: 50 << 20)
    monkeypatch.setattr(select.torch, "empty", empty)
    x = mock.Mock(spec=torch.Tensor, is_cuda=True, device=torch.device("cuda", 0))
    with select.cold_cache((x, x)) as clear:
        clear()
        clear()
    assert made == ([((100 << 20) // 4, torch.int32, torch.device("cuda", 0))] if room else [])
    assert len(zeroed) == (2 if room else 0)


def test_chunks_on_cuda_take_half_its_l2(monkeypatch):
    """The chunk size on a CUDA device: half its L2 as torch reports it, else a fixed size;
    on the CPU, per thread."""
    from types import SimpleNamespace

    from einc.runtime.torch_executor import chunked
    asked = []

    def properties(index, **l2):
        asked.append(index)
        return SimpleNamespace(**l2)
    try:
        chunked._l2_bytes.cache_clear()
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: properties(i, L2_cache_size=50 << 20))
        assert chunked.device_chunk_bytes(torch.device("cuda", 1)) == 25 << 20
        assert chunked.device_chunk_bytes(torch.device("cuda", 1)) == 25 << 20 and asked == [1]    # asked once
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: properties(i))
        assert chunked.device_chunk_bytes(torch.device("cuda", 0)) == chunked.DEVICE_CHUNK_BYTES
    finally:
        chunked._l2_bytes.cache_clear()
    assert chunked.device_chunk_bytes(torch.device("cpu")) == chunked.CHUNK_BYTES * torch.get_num_threads()


def test_a_copy_free_torch_layout_is_not_timed_twice(timed):
    """The model's layout of a plain batched product copies nothing: it is the cuBLAS
    product itself, timed once (as ``blas``)."""
    device, seen, _ = timed
    a, b = torch.randn(2, 3, 4, device=device), torch.randn(2, 4, 5, device=device)
    einc.einsum("bij,bjk->bik", a, b, select="measure")
    assert len(seen) == 2 * TIMED and not any(getattr(f, "ttgt", None) is not None for f in seen)


def test_measure_interleaves_the_candidates_so_a_drift_does_not_pick(monkeypatch):
    """A device whose clock drifts down while the candidates run (each run 0.5 µs slower
    than the one before): timed one after the other, the first candidate would look faster
    although it is not (5 µs against 4); interleaved in rotated rounds, the faster wins.
    (An H200 kept a 30 ms float64 kernel over a 26.7 ms cuBLAS product: the guess tested.)"""
    clock = []

    def drifting(fn, args):
        clock.append(fn)
        return fn() + 0.5 * (len(clock) - 1)
    monkeypatch.setattr(select, "timer", drifting)
    runs = {"triton": 0, "blas": 0, "torch": 0}

    def candidate(name, us):
        def run():
            runs[name] += 1
            return us
        run.__name__ = name
        return run
    choice = select.measure({"triton": candidate("triton", 5.0), "blas": candidate("blas", 4.0)}, ())
    assert choice.backend == "blas", choice.reason
    assert runs == {"triton": TIMED + 1, "blas": TIMED + 1, "torch": 0}   # one warm-up each
    # A B, B A, ... after the first round
    assert [f.__name__ for f in clock[2:6]] == ["triton", "blas", "blas", "triton"]
    three = select.measure({n: candidate(n, us) for n, us in (("triton", 3.0), ("blas", 2.0), ("torch", 1.0))}, ())
    assert three.backend == "torch" and set(three.timings) == {"triton", "blas", "torch"}


def _counting(runs, name, us):
    def run(*args):
        runs.append(name)
        return us
    run.__name__ = name
    return run


def test_the_first_round_leaves_out_a_candidate_far_behind_before_tuning_it(monkeypatch):
    """A kernel runs its first round as its screen has it (one config, untuned); where that
    takes SCREEN times the round's fastest or more, the kernel itself never runs (it is not
    autotuned), its time is kept and the reason says so; a kernel within the factor runs
    (tuned) and is timed in the rounds, and where one candidate is left it is chosen
    without the rounds.  A candidate that is no screened kernel is never left out: its
    first run is a call's time, a kernel's screen the device's alone, and a host-bound
    step far behind a kernel's device time may still beat its call."""
    monkeypatch.setattr(select, "timer", lambda fn, args: fn(*args))
    runs = []
    us = {"triton": 1.0, "screen triton": 9.0, "plain": 3.0, "screen plain": 3.5, "torch": 2.0}
    fn = {n: _counting(runs, n, t) for n, t in us.items()}
    choice = select.measure({"triton": fn["triton"], "torch": fn["torch"], "plain": fn["plain"]}, (),
                            {"triton": fn["screen triton"], "plain": fn["screen plain"]})
    assert choice.backend == "torch" and "triton" not in runs               # 9 >= 4 x 2: never tuned
    assert runs.count("screen triton") == 2 and runs.count("screen plain") == 2   # compile, then timed once
    assert runs.count("plain") == 1 + select.REPEATS and runs.count("torch") == 2 + select.REPEATS
    assert choice.timings == {"torch": 2.0, "plain": 3.0, "triton": 9.0}
    assert "left out: triton 9 µs" in choice.reason
    runs.clear()
    alone = select.measure({"triton": fn["triton"], "torch": fn["torch"]}, (), {"triton": fn["screen triton"]})
    assert alone.backend == "torch" and alone.timings == {"torch": 2.0, "triton": 9.0}
    assert runs == ["screen triton", "screen triton", "torch", "torch"]      # no rounds for one candidate
    runs.clear()
    slow_torch = select.measure({"triton": fn["triton"], "torch": _counting(runs, "torch", 40.0)}, (),
                                {"triton": fn["screen plain"]})
    assert slow_torch.backend == "triton" and slow_torch.timings == {"triton": 1.0, "torch": 40.0}
    assert "left out" not in slow_torch.reason                              # 40 >= 4 x 3.5, but torch stays
    assert runs.count("triton") == 1 + select.REPEATS and runs.count("torch") == 2 + select.REPEATS


class _OnCuda(torch.Tensor):
    is_cuda = True      # (a CPU tensor that the timers take for a CUDA one)


def test_the_first_round_times_a_kernels_screen_on_the_device_alone(monkeypatch):
    """On CUDA operands the default timer times a kernel's one-config first-round run with
    the host's work before the launch hidden (it is set up and launched through Triton's
    JIT path, hundreds of µs on an H100 that the kernel's usual launch does not pay;
    counted, it would leave every small kernel out), and everything else with it counted, as a
    call pays it: the other candidates' first runs and every run of the rounds.  A
    replaced timer (a test's) times every run.  (The events themselves need a GPU.)"""
    arg = torch.zeros(1).as_subclass(_OnCuda)
    seen = []
    monkeypatch.setattr(select, "_cuda_time",
                        lambda fn, args, hide_host=False: seen.append((hide_host, fn.__name__)) or 1.0)
    monkeypatch.setattr(select, "cold_cache", lambda args: contextlib.nullcontext(lambda: None))

    def kernel(*args):
        pass

    def screen(*args):
        pass

    def cublas(*args):
        pass
    select.measure({"triton": kernel, "blas": cublas}, (arg,), {"triton": screen})
    assert seen[:2] == [(True, "screen"), (False, "cublas")]
    assert sorted(seen[2:]) == sorted([(False, "kernel"), (False, "cublas")] * select.REPEATS)
    seen.clear()
    monkeypatch.setattr(select, "timer", lambda fn, args: seen.append(("replaced", fn.__name__)) or 1.0)
    select.measure({"triton": kernel, "blas": cublas}, (arg,), {"triton": screen})
    assert {how for how, _ in seen} == {"replaced"} and len(seen) == 2 + 2 * select.REPEATS


def test_hiding_the_host_sleeps_the_stream_before_the_start_event(monkeypatch):
    """``_cuda_time(hide_host=True)`` queues the sleep, then the start event, then the run,
    then the stop event, all under the operands' device; without it, no sleep."""
    order = []

    class Event:
        def __init__(self, enable_timing):
            self.name = "start" if not any(e == "new start" for e in order) else "stop"
            order.append(f"new {self.name}")

        def record(self):
            order.append(f"record {self.name}")

        def synchronize(self):
            order.append(f"sync {self.name}")

        def elapsed_time(self, other):
            return 0.002

    @contextlib.contextmanager
    def device(d):
        order.append("enter device")
        yield
        order.append("leave device")
    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: order.append(f"sleep {cycles}"))
    monkeypatch.setattr(torch.cuda, "device", device)
    arg = torch.zeros(1).as_subclass(_OnCuda)
    assert select._cuda_time(lambda *a: order.append("run"), (arg,), hide_host=True) == 2.0
    assert order == ["enter device", "new start", "new stop", f"sleep {select.HIDE_HOST_CYCLES}", "record start",
                     "run", "record stop", "sync stop", "leave device"]
    order.clear()
    select._cuda_time(lambda *a: order.append("run"), (arg,))
    assert not any(o.startswith("sleep") for o in order) and order.index("record start") < order.index("run")


def test_a_screen_that_fails_leaves_the_first_round_to_the_kernels_own_launch(monkeypatch):
    """Screening saves time, it decides nothing: where a kernel's screen raises, its own
    launch runs the first round (and an error there is raised as ever, or leaves out an
    optional candidate)."""
    monkeypatch.setattr(select, "timer", lambda fn, args: fn(*args))
    runs = []

    def broken(*args):
        raise RuntimeError("no such config")
    choice = select.measure({"triton": _counting(runs, "triton", 1.0), "torch": _counting(runs, "torch", 2.0)}, (),
                            {"triton": broken})
    assert choice.backend == "triton" and runs.count("triton") == 2 + select.REPEATS
    failing = {"triton": _counting(runs, "triton", 1.0), "plain": broken, "torch": _counting(runs, "torch", 2.0)}
    assert set(select.measure(failing, (), {"plain": broken}).timings) == {"triton", "torch"}
    with pytest.raises(RuntimeError, match="no such config"):
        select.measure({"triton": broken, "torch": _counting(runs, "torch", 2.0)}, (), {"triton": broken})


def test_measure_mode_does_not_tune_a_kernel_its_first_round_left_out(timed, monkeypatch):
    """Through einc.einsum: the kernel's one-config run takes 10 times cuBLAS's, so its
    launch never runs (nothing tuned), cuBLAS is chosen, remembered with the kernel's
    time, and explain says why."""
    device, seen, folder = timed

    def fake(fn, args):
        seen.append(fn.__name__)
        fn(*args)
        return 10.0 if fn.__name__ == "screen" else 5.0 if fn.__name__ == "launch" else 1.0
    monkeypatch.setattr(select, "timer", fake)
    a, b = torch.randn(2, 3, 4, device=device), torch.randn(2, 4, 5, device=device)
    for _ in range(2):
        torch.testing.assert_close(einc.einsum("bij,bjk->bik", a, b, select="measure"), a @ b)
    assert seen == ["screen", "run"]                                # the first round only: one candidate left
    ((key, decision),) = json.loads((folder / "decisions.json").read_text())["steps"].items()
    assert decision == {"backend": "blas", "us": {"blas": 1.0, "triton": 10.0}}
    shown = einc.explain("bij,bjk->bik", a, b, select="measure")
    assert shown.backends == ("blas bmm/mm",) and "left out: triton 10 µs" in shown.reasons[0]
    (kernel,) = einc.explain("bij,bjk->bik", a, b, select="kernel").backends
    module = sys.modules["einc_kernels." + kernel.removeprefix("triton ")]
    assert not module.launcher.layouts                               # launch() never ran: no layout set up


@pytest.mark.parametrize("equation,shapes,path", [
    ("bi,oij,bj->bo", [(6, 5), (7, 5, 4), (6, 4)], [(0, 2), (0, 1)]),               # a fused prologue
    ("ad,ac,db,dc->ab", [(4, 6), (4, 5), (6, 3), (6, 5)], None),                     # fused on two sides
])
def test_measure_runs_a_fused_plan_whose_values_skip_ids(kernel_device, monkeypatch, tmp_path, equation, shapes, path):
    """Measure mode (a GPU's default) on a plan with fused steps: a fused step's result id
    skips its parts' ids, so the first call must find values by id, not by position (it
    indexed past the end on an H200, fell back to torch and warned).  The op's scale goes
    into the last kernel's epilogue on the first call as on later ones; gradients run."""
    import einc.custom_op  # noqa: F401
    from einc.planner.options import encode
    monkeypatch.setenv("EINC_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("EINC_SELECT", "measure")
    monkeypatch.setattr(select, "timer", lambda fn, args: 1.0 if getattr(fn, "__name__", "") == "launch" else 5.0)
    einc.cache_clear()
    g = torch.Generator().manual_seed(11)
    ops = [torch.randn(s, generator=g, dtype=torch.float64).to(kernel_device).requires_grad_() for s in shapes]
    optimize, memory = encode(path or "auto", None)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="einc:")      # a fallback to torch warns: fail instead
        for _ in range(2):                                      # the measuring first call, then the chosen
            out = torch.ops.einc.einsum.default(equation, ops, optimize, memory, scale=0.5)
            torch.testing.assert_close(out, 0.5 * torch.einsum(equation, *ops))
            grads = torch.autograd.grad(out.sum(), ops)
            expected = torch.autograd.grad((0.5 * torch.einsum(equation, *ops)).sum(), ops)
            for got, want in zip(grads, expected):
                torch.testing.assert_close(got, want)
        shown = einc.explain(equation, *ops, optimize=path or "auto", select="measure")
    assert any(s.kind == "fused" for s in shown.steps), str(shown)
    einc.cache_clear()
