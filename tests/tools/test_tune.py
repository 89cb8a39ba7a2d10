"""``einc tune``: every step of the given calls timed ahead of time (a stand-in timer here,
kernels under Triton's interpreter on the CPU), the winners kept in ``decisions.json``,
where a new process's learn-mode first call takes them; bad input is one error line and
exit status 2, before anything is timed."""

import json
import os
import subprocess
import sys

import pytest
import torch

import einc
from einc.errors import ArgumentError, ConfigError
from einc.runtime import select
from einc.tools.cli import main
from tests.tools.test_cli import usage_error

PERMUTED = "dega,gfbc->abcdef"      # a permuted result: learn mode's modelled first choice is the kernel
CHAIN = "ij,jk,kl->il"              # two copy-free products: cuBLAS, modelled and measured here


def _kind(fn) -> str:
    return "kernel" if getattr(fn, "__module__", "").startswith("einc_kernels") else "other"


@pytest.fixture
def tuning(kernel_device, monkeypatch, tmp_path):
    """Kernels possible (the interpreter on CPU), a cache folder of the test's own, and a
    stand-in for measure mode's timer: a kernel takes ``us["kernel"]`` µs, anything else
    ``us["other"]``; ``seen`` lists what it timed."""
    monkeypatch.setenv("EINC_CACHE_DIR", str(tmp_path))
    seen, us = [], {"kernel": 1.0, "other": 5.0}

    def fake(fn, args):
        fn(*args)
        seen.append(_kind(fn))
        return us[_kind(fn)]
    monkeypatch.setattr(select, "timer", fake)
    einc.cache_clear()
    yield kernel_device, seen, us, tmp_path
    einc.cache_clear()


def _calls(tmp_path, text: str) -> str:
    path = tmp_path / "calls.txt"
    path.write_text(text)
    return str(path)


_FIRST_CALL = """
import json, sys, torch, einc
from einc.runtime import learn
timed = []
def fake(fn, args):
    timed.append(fn)
    return fn(*args), lambda: 1.0
learn.timer = fake
device = sys.argv[1]
g = torch.Generator().manual_seed(1)
shown = {}
for equation, shapes, dtype in [("dega,gfbc->abcdef", [(2, 3, 4, 5), (4, 2, 3, 2)], torch.float64),
                                ("ij,jk,kl->il", [(16, 8), (8, 16), (16, 8)], torch.float32)]:
    ops = [torch.randn(s, generator=g, dtype=dtype).to(device) for s in shapes]
    torch.testing.assert_close(einc.einsum(equation, *ops), torch.einsum(equation, *ops))
    e = einc.explain(equation, *ops)
    shown[equation] = {"backends": list(e.backends), "reasons": list(e.reasons)}
print(json.dumps({"timed": len(timed), "shown": shown}))
"""


def _first_calls(device, folder) -> dict:
    """What a new process in learn mode runs on its first call of each tuned call."""
    env = {**os.environ, "EINC_CACHE_DIR": str(folder), "EINC_SELECT": "learn",
           "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    if device.type == "cpu":
        env["EINC_BACKEND"] = "triton"
    done = subprocess.run([sys.executable, "-c", _FIRST_CALL, str(device)], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.kernels
@pytest.mark.parametrize("faster", ["kernel", "other"])
def test_tuned_decisions_are_a_new_processs_first_choice(tuning, faster, capsys):
    """The permuted step's winner is what the stand-in timer says is faster: a new process's
    learn-mode first call takes it from decisions.json (the model alone would start the
    permuted step on the kernel, the chain's copy-free products on cuBLAS) and times nothing."""
    device, seen, us, folder = tuning
    us.update({faster: 1.0, "other" if faster == "kernel" else "kernel": 2.0})
    calls = _calls(folder, f"# two calls\n{PERMUTED} 2x3x4x5,4x2x3x2 float64\n\n{CHAIN} 16x8,8x16,16x8\n")
    assert main(["tune", "--calls", calls, "--device", device.type, "--repeats", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    permuted, chain = out["calls"]
    (step,) = permuted["steps"]
    want = "triton" if faster == "kernel" else "torch"
    assert step["winner"] == want and step["timed"]
    assert set(step["candidates"]) == {"triton", "plain", "torch"}          # every candidate, with its time
    assert step["candidates"]["torch"] == us["other"] and step["candidates"]["triton"] == us["kernel"]
    products = "triton" if faster == "kernel" else "blas"
    assert [s["winner"] for s in chain["steps"]] == [products, products]
    assert out["summary"]["steps_timed"] == 3 and out["repeats"] == 2
    saved = json.loads((folder / "decisions.json").read_text())["steps"]
    assert sorted(d["backend"] for d in saved.values()) == sorted([want, products, products])
    assert "kernel" in seen and "other" in seen

    first = _first_calls(device, folder)
    assert first["timed"] == 0                                             # nothing learned: all decided
    shown = first["shown"]
    assert shown[PERMUTED]["backends"][0].startswith("triton " if want == "triton" else "torch")
    assert all(b.startswith("triton " if products == "triton" else "blas ") for b in shown[CHAIN]["backends"])
    for e in shown.values():
        assert all(r == "measured earlier (decisions.json)" for r in e["reasons"]), e


@pytest.mark.kernels
def test_tune_says_when_the_decisions_could_not_be_written(tuning, capsys, tmp_path):
    # a folder named decisions.json: it printed "Decisions written to ..." and exited 0
    device, seen, us, folder = tuning
    (folder / "decisions.json").mkdir()
    calls = _calls(tmp_path, "bij,bjk->bik 2x3x4,2x4x5\n")
    with pytest.warns(RuntimeWarning, match="ignoring the backend decisions file"):
        assert main(["tune", "--calls", calls, "--device", device.type, "--repeats", "1"]) == 1
    out = capsys.readouterr().out
    assert "could NOT be written" in out and "Decisions written" not in out


@pytest.mark.kernels
def test_tune_times_afresh_prints_a_table_and_a_step_met_again_once(tuning, capsys, tmp_path):
    """A decision already on disk is timed again (the table's winner follows the timer, not
    the file); the same step met by two calls is timed once; duplicate calls once."""
    device, seen, us, folder = tuning
    a, b = torch.randn(2, 3, 4, device=device), torch.randn(2, 4, 5, device=device)
    einc.einsum("bij,bjk->bik", a, b, select="measure")                  # decided: blas (1 < 5 µs)
    assert len(json.loads((folder / "decisions.json").read_text())["steps"]) == 1
    einc.cache_clear()
    us.update(kernel=1.0, other=3.0)                                       # now the kernel wins
    calls = _calls(tmp_path, '{"equation": "bij,bjk->bik", "shapes": [[2, 3, 4], [2, 4, 5]]}\n'
                             "bij,bjk->bik 2x3x4,2x4x5 float32\n"          # the same call again
                             "xij,xjk->xik 2x3x4,2x4x5\n"                  # the same, other letters
                             "bij,bjk,bkl->bil 2x3x4,2x4x5,2x5x6\n")       # its first step is the same
    seen.clear()
    assert main(["tune", "--calls", calls, "--device", device.type, "--repeats", "3"]) == 0
    out = capsys.readouterr().out
    assert "median of 3" in out and "2 call(s), 2 step(s) timed" in out and "1 step(s) met again" in out
    lines = out.splitlines()
    assert lines[0].startswith("bij,bjk->bik  2x3x4,2x4x5  float32  (") and lines[0].endswith("calls.txt:1)")
    assert lines[2].split() == ["1", "abc,acd->abd", "triton", "1,", "blas", "3", "triton"]     # fastest first
    assert lines[6].split() == ["1", "abc,acd->abd", "(timed", "above)", "triton"]
    # a first round and 3 more for each candidate of 2 steps: 2 or 3 a step (a third where
    # the torch step's layout copies something, which at these tiny sizes is the direct one)
    assert len(seen) % (1 + 3) == 0 and 2 * 2 <= len(seen) // (1 + 3) <= 2 * 3
    saved = json.loads((folder / "decisions.json").read_text())["steps"]
    assert len(saved) == 2 and sum(d["backend"] == "triton" for d in saved.values()) >= 1


def test_strides_of_a_call_are_the_operands(tmp_path):
    """A call's strides give each operand's layout (a transposed view here), which a step's
    decision is keyed by."""
    from einc.tools import tune
    (call,) = tune.read_calls(_calls(tmp_path, '{"equation": "bij,bkj->bik", "shapes": [[2, 3, 4], [2, 5, 4]], '
                                               '"strides": [[12, 4, 1], [20, 1, 5]], "dtype": "torch.float64"}\n'),
                              "float32")
    a, b = tune.operands(call, "cpu")
    assert a.is_contiguous() and b.stride() == (20, 1, 5) and b.dtype == a.dtype == torch.float64
    torch.testing.assert_close(einc.einsum("bij,bkj->bik", a, b), torch.einsum("bij,bkj->bik", a, b))


def test_a_named_equation_in_a_calls_file_is_resolved_as_on_the_command_line(tmp_path):
    """As ``einc tune EQUATION --shapes`` and einsum resolve it: sizes from the shapes (or
    "sizes"), the shapes and strides split as the operands' views are."""
    from einc.tools import tune
    text = ("b (h d), h d e -> b (h e) 2x32,4x8x5\n"
            '{"equation": "b (h d) -> b h d", "shapes": [[2, 32]], "sizes": {"h": 4}}\n'
            '{"equation": "b (h d) 1, h d e -> b h e", "shapes": [[2, 32, 1], [4, 8, 5]], '
            '"strides": [[1, 2, 1], [40, 5, 1]]}\n')
    first, second, third = tune.read_calls(_calls(tmp_path, text), "float32")
    assert (first.equation, first.shapes) == ("bhd,hde->bhe", [(2, 4, 8), (4, 8, 5)])
    assert (second.equation, second.shapes) == ("bhd->bhd", [(2, 4, 8)])
    x = torch.empty(32, 2).t()[..., None]       # (2, 32, 1), strides (1, 2, 1)
    assert third.shapes[0] == (2, 4, 8) and third.strides[0] == x[..., 0].view(2, 4, 8).stride()
    a, w = tune.operands(third, "cpu")
    torch.testing.assert_close(einc.einsum("bhd,hde->bhe", a, w), torch.einsum("bhd,hde->bhe", a, w))
    with pytest.raises(ArgumentError, match="calls.txt:1: 'b \\(h d\\) -> b h d': cannot split"):
        tune.read_calls(_calls(tmp_path, '{"equation": "b (h d) -> b h d", "shapes": [[2, 32]]}\n'), "float32")


@pytest.mark.parametrize("text, message", [
    ("ij,jk->ik\n", "calls.txt:1: expected EQUATION SHAPES [DTYPE]"),
    ("# nothing\n\n", "no calls in the file"),
    ("ij,jk->ik 2x3,4x5\n", "calls.txt:1: 'ij,jk->ik': subscript j has size 4"),
    ("ij,jk->ik 2x3,3x4\nij,jk->ik 2x3\n", "calls.txt:2: 'ij,jk->ik': the equation names 2 operands but the shapes "
     "give 1"),
    ("ij,jk->iz 2x3,3x4\n", "output subscript z does not appear"),
    ("ij,jk->ik 2xq,3x4\n", "calls.txt:1: bad shape '2xq'"),
    ('{"equation": "ij,jk->ik", "shapes": [[2, 3], [3, -4]]}\n', '"shapes" is a list of lists of whole numbers'),
    ('{"equation": "ij,jk->ik", "shapes": [[2, 3], [3, 4]], "strides": [[3, 1], [1]]}\n',
     '"strides" needs one stride per dimension'),
    ('{"equation": "ij,jk->ik", "shapes": [[2, 3], [3, 4]], "dtype": "float8"}\n', "unknown dtype 'float8'"),
    ('{"equation": "ij,jk->ik", "shapes": [[2, 3]\n', "calls.txt:1: not a valid JSON object"),
    ('[{"shapes": [[2, 3]]}]', "calls.txt: call 1: a call is an object with \"equation\" and \"shapes\""),
    ("[]\n", "calls.txt: no calls in the file"),       # (it said to give --calls FILE)
    ("[" * 100_000 + "]" * 100_000, "calls.txt: not valid JSON"),     # (json's RecursionError: a traceback)
])
def test_a_bad_call_file_is_one_error_line_before_anything_runs(text, message, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("EINC_CACHE_DIR", str(tmp_path))
    line = usage_error(["tune", "--calls", _calls(tmp_path, text), "--device", "cpu"], capsys)
    assert message in line
    assert not (tmp_path / "decisions.json").exists()


@pytest.mark.parametrize("argv, message", [
    (["tune"], "give an EQUATION with --shapes, or --calls FILE"),
    (["tune", "ij,jk->ik"], "--shapes is required with an EQUATION"),
    (["tune", "--shapes", "2x3,3x4"], "--shapes and --size go with an EQUATION"),
    (["tune", "--calls", "/no/such/calls.txt"], "--calls /no/such/calls.txt: cannot read the file"),
    (["tune", "ij,jk->ik", "--shapes", "2x3,3x4", "--repeats", "0"], "must be at least 1"),
])
def test_bad_usage_is_one_error_line(argv, message, capsys):
    assert message in usage_error(argv, capsys)


def test_the_cpu_without_kernels_says_what_it_cannot_do(tmp_path, capsys, monkeypatch):
    """Every CPU step runs torch's ops: nothing to choose, so an error that says so (and what
    can be done here: --dry-run, EINC_BACKEND=triton); no CUDA device: --device cuda says so."""
    monkeypatch.setenv("EINC_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("EINC_BACKEND", raising=False)
    line = usage_error(["tune", "ij,jk->ik", "--shapes", "2x3,3x4", "--device", "cpu"], capsys)
    assert "nothing to choose" in line and "--dry-run" in line and "EINC_BACKEND=triton" in line
    if not torch.cuda.is_available():
        argv = ["tune", "ij,jk->ik", "--shapes", "2x3,3x4", "--device", "cuda"]
        assert "torch sees no CUDA device" in usage_error(argv, capsys)
    assert not (tmp_path / "decisions.json").exists()


def test_a_dry_run_plans_without_timing_or_writing(tmp_path, capsys, monkeypatch):
    """--dry-run works without a GPU: each call's plan with learn mode's first choice on CUDA."""
    monkeypatch.setenv("EINC_CACHE_DIR", str(tmp_path))
    assert main(["tune", PERMUTED, "--shapes", "2x3x4x5,4x2x3x2", "--device", "cuda", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "triton einc_mm_" in out and "modelled" in out and "nothing timed, nothing written" in out
    assert main(["tune", "b n (h d), h d e -> b n (h e)", "--shapes", "2x16x32,4x8x8", "--size", "h=4",
                 "--device", "cuda", "--dry-run", "--json"]) == 0
    (call,) = json.loads(capsys.readouterr().out)["calls"]
    assert call["dtype"] == "float32" and len(call["plan"]["steps"]) >= 1
    # without --size where the shapes tell every size (h from `h d e`), as einc dump and einsum take it
    assert main(["tune", "b n (h d), h d e -> b n (h e)", "--shapes", "2x16x32,4x8x8", "--device", "cuda",
                 "--dry-run", "--json"]) == 0
    (again,) = json.loads(capsys.readouterr().out)["calls"]
    assert again["plan"] == call["plan"]
    assert not (tmp_path / "decisions.json").exists()


# ----------------------------------------------------------------------- EINC_RECORD

def test_a_program_records_its_calls_for_einc_tune(tmp_path, monkeypatch, capsys):
    """EINC_RECORD appends each call that makes a new plan cache entry, once, as a line
    einc tune reads: the strides of an operand that is not contiguous, no call whose
    operands differ in dtype (einc tune takes one a call)."""
    record = tmp_path / "calls.jsonl"
    monkeypatch.setenv("EINC_RECORD", str(record))
    einc.cache_clear()
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    for _ in range(3):
        einc.einsum("ij,jk->ik", a, b)
    y = torch.randn(2, 4, 5, dtype=torch.float64).transpose(1, 2)
    einc.einsum("bij,bkj->bik", torch.randn(2, 3, 4, dtype=torch.float64), y)
    with pytest.raises(einc.EincError, match="one dtype"):
        einc.einsum("ij,jk->ik", a, b.double())                             # mixed dtypes: not written
    einc.einsum(a, [0, 1], b, [1, 2], [0, 2])                            # the first call, in sublists
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    assert lines == [
        {"equation": "ij,jk->ik", "shapes": [[3, 4], [4, 5]], "dtype": "float32", "device": "cpu"},
        {"equation": "bij,bkj->bik", "shapes": [[2, 3, 4], [2, 5, 4]], "dtype": "float64",
         "strides": [[12, 4, 1], [20, 1, 5]], "device": "cpu"},
    ]
    einc.cache_clear()
    monkeypatch.delenv("EINC_RECORD")
    assert main(["tune", "--calls", str(record), "--device", "cuda", "--dry-run", "--json"]) == 0
    calls = json.loads(capsys.readouterr().out)["calls"]
    assert [(c["equation"], c["dtype"]) for c in calls] == [("ij,jk->ik", "float32"), ("bij,bkj->bik", "float64")]
    (call,) = tune_calls(record, "bij")
    assert call.strides == [(12, 4, 1), (20, 1, 5)]


def tune_calls(path, prefix):
    from einc.tools import tune
    return [c for c in tune.read_calls(str(path), "float32") if c.equation.startswith(prefix)]


def test_a_bad_or_unwritable_record_file_is_said_once(tmp_path, monkeypatch):
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    monkeypatch.setenv("EINC_RECORD", "calls.jsonl")
    einc.cache_clear()
    with pytest.raises(ConfigError, match="EINC_RECORD"):
        einc.einsum("ij,jk->ik", a, b)
    monkeypatch.setenv("EINC_RECORD", str(tmp_path))                      # a folder: cannot be appended to
    einc.cache_clear()
    with pytest.warns(RuntimeWarning, match="cannot append to EINC_RECORD") as caught:
        torch.testing.assert_close(einc.einsum("ij,jk->ik", a, b), a @ b)
        torch.testing.assert_close(einc.einsum("ik,kj->ij", a, b), a @ b)
    assert len([w for w in caught if "EINC_RECORD" in str(w.message)]) == 1
    einc.cache_clear()


@pytest.mark.kernels
def test_a_call_that_fails_on_the_device_leaves_the_others_tuned(tuning, monkeypatch, capsys):
    """Out of memory making one call's operands: that call is reported, the rest are tuned,
    and the exit status is 1."""
    from einc.tools import tune
    device, seen, us, folder = tuning
    real = tune.operands

    def short_of_memory(call, where):
        if call.shapes[0] == (2, 3, 4):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 9 GiB")
        return real(call, where)
    monkeypatch.setattr(tune, "operands", short_of_memory)
    calls = _calls(folder, "bij,bjk->bik 2x3x4,2x4x5\nij,jk->ik 3x4,4x5\n")
    assert main(["tune", "--calls", calls, "--device", device.type, "--repeats", "1"]) == 1
    out = capsys.readouterr().out
    assert "failed: OutOfMemoryError: CUDA out of memory" in out and "1 call(s) FAILED" in out
    assert "2 call(s), 1 step(s) timed" in out
    assert len(json.loads((folder / "decisions.json").read_text())["steps"]) == 1


@pytest.mark.kernels
def test_a_call_without_kernels_has_nothing_to_choose(tuning, capsys):
    device, seen, us, folder = tuning
    assert main(["tune", "ij,jk->ik", "--shapes", "3x4,4x5", "--dtype", "int64", "--device", device.type]) == 0
    out = capsys.readouterr().out
    assert "nothing to choose: " in out and "no generated kernels for int64" in out and "Nothing written." in out
    assert not seen and not (folder / "decisions.json").exists()
