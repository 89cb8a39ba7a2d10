"""``bench/libraries.py`` without downloads: its pytest plugin (einc installed as
torch.einsum, calls counted inside einc) and its reading of junit files, on a small local
test file run unpatched and patched in subprocesses; the patched run's recorded calls replayed
against float64, and the replay flagging wrong answers."""

import json
import signal
import subprocess
import textwrap
import time

import pytest
import torch

import einc
from bench import einsum_replay, libraries

TESTS = textwrap.dedent('''
    import pytest
    import torch
    from torch import einsum      # bound at import: must be einc's when patched

    def test_five_calls():
        a, b = torch.randn(3, 4), torch.randn(4, 5)
        for _ in range(3):
            torch.einsum("ij,jk->ik", a, b)
        einsum("ii->i", torch.randn(3, 3))
        torch.einsum("ij->", torch.randint(0, 5, (2, 2)))       # integers: the old deadlock

    def test_one_call_with_its_gradient():
        a = torch.randn(3, 4, requires_grad=True)
        torch.einsum("ij,ij->", a, torch.randn(3, 4)).backward()   # forward, and one gradient einsum at most
        assert a.grad is not None

    def test_passes_only_unpatched():
        assert torch.einsum.__module__ == "torch.functional", "einc is installed"

    def test_fails():
        assert torch.einsum("i,i->", torch.ones(2), torch.ones(2)).item() == 3.0, "two, not three"

    @pytest.mark.skip(reason="skipped on purpose")
    def test_skipped():
        pass

    @pytest.fixture
    def broken():
        raise RuntimeError("fixture broken")

    def test_error(broken):
        pass

    def test_fx_records_einc():
        import torch.fx
        class M(torch.nn.Module):
            def forward(self, x, y):
                return torch.einsum("ij,jk->ik", x, y)
        gm = torch.fx.symbolic_trace(M())
        names = [getattr(n.target, "__module__", "") for n in gm.graph.nodes if n.op == "call_function"]
        assert names == [torch.einsum.__module__]
        gm(torch.randn(2, 2), torch.randn(2, 2))
''')


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    return tmp_path_factory.mktemp("lib") / "out"


@pytest.fixture(scope="module")
def runs(out):
    folder = out.parent
    (folder / "test_local.py").write_text(TESTS)
    unpatched = libraries.run_pytest(folder, ["test_local.py"], {}, False, out, "unpatched", timeout=300)
    patched = libraries.run_pytest(folder, ["test_local.py"], {}, True, out, "patched", timeout=300, record=True)
    return unpatched, patched


@pytest.mark.slow
def test_junit_counts_and_outcomes(runs):
    unpatched, patched = runs
    assert (unpatched.tests, unpatched.passed, unpatched.failed, unpatched.errors, unpatched.skipped) == (7, 4, 1, 1, 1)
    assert (patched.tests, patched.passed, patched.failed, patched.errors, patched.skipped) == (7, 3, 2, 1, 1)
    assert unpatched.outcomes["test_local::test_fails"][0] == "failed"
    assert "two, not three" in unpatched.outcomes["test_local::test_fails"][1]
    assert unpatched.outcomes["test_local::test_error"] == ("error", unpatched.outcomes["test_local::test_error"][1])
    assert "fixture broken" in unpatched.outcomes["test_local::test_error"][1] or \
        "setup" in unpatched.outcomes["test_local::test_error"][1]
    assert unpatched.outcomes["test_local::test_skipped"][0] == "skipped"


@pytest.mark.slow
def test_regressions_are_the_tests_that_fail_only_patched(runs):
    unpatched, patched = runs
    lost = libraries.regressions(unpatched, patched)
    assert [(t, o) for t, o, _ in lost] == [("test_local::test_passes_only_unpatched", "failed")]
    assert "einc is installed" in lost[0][2]


@pytest.mark.slow
def test_the_plugin_counts_calls_reaching_einc(runs):
    unpatched, patched = runs
    assert unpatched.counts is None          # no plugin, no counts
    counts = patched.counts
    assert counts["still_patched"] is True
    # test_five_calls: 5; the gradient test: 1 forward + at most 1 gradient einsum; test_fails: 1;
    # the fx test: 1 (the traced graph's run; tracing itself reaches __torch_function__ only)
    assert 8 <= counts["calls"] <= 9, counts
    assert counts["torch_function"] >= 1, counts       # the fx proxy
    assert counts["equations"] >= 5, counts
    row = libraries.row("local", "0", unpatched, patched)
    assert row.startswith("| local | 0 | 7 | 4 / 1 / 1 / 1 | 3 / 2 / 1 / 1 | ")
    assert counts["dtypes"]["int64"] == 1 and counts["dtypes"]["float32,float32"] >= 5, counts


@pytest.mark.slow
def test_the_recorded_calls_replay_against_float64(runs, out):
    recorded = json.loads((out / "patched.calls.json").read_text())
    described = [json.loads(key) for key in recorded]
    assert ["ij,jk->ik", [[[3, 4], [4, 1], 0, "float32", False], [[4, 5], [5, 1], 0, "float32", False]]] in described
    assert recorded[json.dumps(described[0])] >= 1
    assert any(text == "ij->" and layouts[0][3] == "int64" for text, layouts in described)
    assert any(layouts[0][4] for _, layouts in described)       # the operand that requires grad
    replayed = libraries.replay_recorded(out / "patched.calls.json")
    assert replayed["flagged"] == [] and replayed["replayed"] == len(recorded) and replayed["torch_refused"] == 0
    assert replayed["with_gradients"] >= 1 and replayed["dtypes"]["int64"] == 1
    assert "0 flagged" in libraries.replay_line("local", replayed)


def _conjugated(result):
    """``result`` whose gradient is conjugated on its way back: the wrong convention."""
    class Conj(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, grad):
            return grad.conj()
    return Conj.apply(result)


@pytest.mark.parametrize("wrong, layouts, reason", [
    (lambda r: r + 1e-3, [[[3, 4], [4, 1], 0, "float32", False], [[4, 5], [1, 4], 0, "float32", False]], "value"),
    (_conjugated, [[[3, 4], [4, 1], 0, "complex64", True], [[4, 5], [0, 0], 2, "complex64", True]], "gradient"),
    (lambda r: r + 1, [[[3, 4], [4, 1], 0, "int32", False], [[4, 5], [5, 1], 0, "int32", False]], "integers"),
    (lambda r: r.to(torch.float64), [[[3, 4], [4, 1], 0, "float32", False], [[4, 5], [5, 1], 0, "float32", False]],
     "einc gave"),
])
def test_replay_flags_a_wrong_answer_and_passes_einc(wrong, layouts, reason):
    gen = torch.Generator().manual_seed(0)
    assert einsum_replay.replay_call(einc.einsum, "ij,jk->ik", layouts, gen) is None
    why = einsum_replay.replay_call(lambda eq, *ops: wrong(einc.einsum(eq, *ops)), "ij,jk->ik", layouts, gen)
    assert why is not None and why.startswith(reason), why


def test_parse_junit_ranks_a_failure_over_a_teardown_error(tmp_path):
    junit = tmp_path / "j.xml"
    junit.write_text('<testsuites><testsuite><testcase classname="m" name="t1">'
                     '<failure message="boom">Traceback\nmore</failure>'
                     '<error message="teardown"/></testcase><testcase classname="m" name="t2">'
                     '<skipped type="pytest.xfail" message="x"/></testcase><testcase classname="m" name="t3"/>'
                     '</testsuite></testsuites>')
    run = libraries.parse_junit(junit)
    assert run.outcomes == {"m::t1": ("failed", "boom"), "m::t2": ("skipped", "x"), "m::t3": ("passed", "")}
    assert (run.tests, run.passed, run.failed, run.errors, run.skipped) == (3, 1, 1, 0, 1)


@pytest.mark.slow
def test_a_run_past_its_timeout_is_interrupted_and_keeps_the_tests_it_ran(tmp_path):
    (tmp_path / "test_slow.py").write_text("import time\n\ndef test_quick():\n    pass\n\n"
                                           "def test_slow():\n    time.sleep(600)\n")
    start = time.perf_counter()
    # as when started in the background by a shell without job control (nox ... &): SIGINT
    # ignored, which the child would inherit -- the run must still hear its Ctrl-C
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        run = libraries.run_pytest(tmp_path, ["test_slow.py"], {}, True, tmp_path / "out", "slow", timeout=20)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert time.perf_counter() - start < 200
    assert run.complete is False
    assert run.outcomes["test_slow::test_quick"][0] == "passed"
    assert run.counts is not None and run.counts["calls"] == 0     # the plugin still wrote its counts
    assert "(interrupted)" in libraries.row("slow", "0", run, run)


def test_a_call_torch_refuses_is_counted_apart():
    wrong_sizes = json.dumps(["ij,jk->ik", [[[3, 4], [4, 1], 0, "float32", False],
                                            [[5, 6], [6, 1], 0, "float32", False]]])
    fine = json.dumps(["ij->j", [[[3, 4], [4, 1], 0, "float64", True]]])
    replayed = einsum_replay.replay({wrong_sizes: 1, fine: 1})
    assert (replayed["replayed"], replayed["torch_refused"], replayed["flagged"]) == (2, 1, [])
    assert "1 that torch.einsum refused" in libraries.replay_line("two", replayed)


def test_repository_tests_are_taken_from_the_version_tag(tmp_path):
    repo = tmp_path / "upstream"
    (repo / "tests" / "ops").mkdir(parents=True)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    (repo / "tests" / "ops" / "test_a.py").write_text("def test_a():\n    pass\n")
    (repo / "tests" / "other.py").write_text("tagged\n")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "one"], check=True)
    subprocess.run([*git, "tag", "1.0"], check=True)
    (repo / "tests" / "ops" / "test_a.py").write_text("def test_a():\n    assert False\n")   # past the tag
    subprocess.run([*git, "commit", "-q", "-am", "two"], check=True)
    lib = libraries.Library("lib", "1.0", git="https://example.invalid/lib", git_tests=("tests/ops",),
                            pytest_args=("tests/ops",))
    root, args = libraries.locate_tests(lib, tmp_path / "scratch", str(repo))
    assert args == ["tests/ops"]
    assert (root / "tests" / "ops" / "test_a.py").read_text() == "def test_a():\n    pass\n"
    assert not (root / "tests" / "other.py").exists()
    assert libraries.locate_tests(lib, tmp_path / "scratch", "/nowhere") == (root, args)    # fetched once
