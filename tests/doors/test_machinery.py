"""einc inside PyTorch's machinery, called directly (``tests/doors/test_patched.py`` runs the same
kinds of code with einc patched in as ``torch.einsum``): a patched-in call returns instead of
deadlocking, FX, TorchFunctionMode and tensor subclasses see one einc call, TorchScript compiles
it, and ``torch.jit.trace`` records a call that holds at every shape, not a plan for one.  The
processes at the end (a forked child, a DataLoader's workers) get the parent's answers."""

import threading
import warnings

import pytest
import torch
import torch.fx

import einc
from einc.errors import ReentrantCallError, UnsupportedDtypeError
from einc.runtime.cache import LRUCache
from einc.runtime.reference import torch_einsum


def _in_thread(fn, timeout=60.0):
    """``fn()``'s result, or the exception it raised, from a thread that must return."""
    out = []
    t = threading.Thread(target=lambda: out.append(_outcome(fn)), daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), "the call did not return (a deadlock)"
    return out[0]


# ---------------------------------------------------------------- 1. deadlock when patched

@pytest.mark.parametrize("dtypes", [(torch.int64, torch.int64), (torch.bool,), (torch.int32, torch.float32)])
def test_patched_in_as_torch_einsum_an_integer_call_returns(monkeypatch, dtypes):
    einc.cache_clear()      # a first call: the plan, and torch's result dtype, are asked for now
    monkeypatch.setattr(torch, "einsum", einc.einsum)
    a = torch.randint(0, 5, (3, 4)).to(dtypes[0])
    ops = (a, torch.randint(0, 5, (4, 5)).to(dtypes[1])) if len(dtypes) == 2 else (a,)
    eq = "ij,jk->ik" if len(ops) == 2 else "ij->j"
    out = _in_thread(lambda: torch.einsum(eq, *ops))
    expected = _outcome(lambda: torch_einsum(eq, *ops))
    if isinstance(expected, Exception):     # int32 with float32: torch refuses, and so must einc
        assert isinstance(out, RuntimeError) and isinstance(expected, RuntimeError), (out, expected)
        return
    assert out.dtype == expected.dtype
    torch.testing.assert_close(out, expected)


def test_a_thread_asking_for_the_key_it_builds_gets_an_error_not_a_hang():
    cache = LRUCache(8)
    err = _in_thread(lambda: cache.get_or_build("k", lambda: cache.get_or_build("k", lambda: 1)))
    assert isinstance(err, ReentrantCallError) and isinstance(err, RuntimeError)
    assert cache.get_or_build("k", lambda: 2) == 2      # the key is free again, and built once
    assert cache.get_or_build("k", lambda: 3) == 2
    # another key inside a build is fine
    assert cache.get_or_build("a", lambda: cache.get_or_build("b", lambda: 4) + 1) == 5


def _outcome(fn):
    """``fn()``, or the exception it raised."""
    try:
        return fn()
    except Exception as e:      # noqa: BLE001 - returned to the test
        return e


def test_the_benchmark_times_torchs_own_einsum_when_the_attribute_is_patched(monkeypatch):
    from einc.tools.benchmark import runner
    monkeypatch.setattr(torch, "einsum", einc.einsum)
    fns = runner.methods("ij,jk->ik", [torch.randn(2, 3), torch.randn(3, 4)])
    assert fns["torch"].func is torch_einsum and torch_einsum is not einc.einsum
    assert torch_einsum.__module__ == "torch.functional"


# ---------------------------------------------------------------- 2. __torch_function__

def test_fx_symbolic_trace_records_one_einc_node():
    class M(torch.nn.Module):
        def forward(self, x, y):
            return einc.einsum("ij,jk->ik", x, y, optimize="greedy")

    gm = torch.fx.symbolic_trace(M())
    calls = [n for n in gm.graph.nodes if n.op == "call_function"]
    assert [n.target for n in calls] == [einc.einsum]
    assert calls[0].kwargs == {"optimize": "greedy"}        # defaults are not recorded
    x, y = torch.randn(2, 3), torch.randn(3, 4)
    torch.testing.assert_close(gm(x, y), x @ y)


@pytest.mark.parametrize("constants,k", [((), 5), ((2,), 5), ((2,), 1)], ids=["none", "folded", "broadcast"])
def test_fx_symbolic_trace_records_an_expression_as_one_einc_node(constants, k):
    # an expression's call took the fx.Proxy for a bad operand: "operand 0 must be a torch.Tensor, got Proxy"
    shapes = [(3, 4), (4, k), (5, 6)]       # (k of 1: broadcast against the constant, then grown to 5)
    given = {c: torch.randn(shapes[c]) for c in constants}
    expr = einc.contract_expression("ij,jk,kl->il", *[given.get(c, s) for c, s in enumerate(shapes)],
                                    constants=list(given))

    class M(torch.nn.Module):
        def forward(self, a, b, c=None):
            return expr(a, b) if c is None else expr(a, b, c)

    gm = torch.fx.symbolic_trace(M(), concrete_args={"c": None} if given else None)
    assert len([n for n in gm.graph.nodes if n.target is einc.einsum]) == 1
    for rows, middle in [(3, 4), (7, 4), (3, 9)]:
        ops = [torch.randn(rows, middle), torch.randn(middle, 5), torch.randn(5, 6)]
        whole = [given.get(c, o) for c, o in enumerate(ops)]
        torch.testing.assert_close(gm(*[o for c, o in enumerate(ops) if c not in given]),
                                   torch_einsum("ij,jk,kl->il", *whole))


@pytest.mark.parametrize("call,functions", [
    (lambda f, x, y: f("ij,jk->ik", (x, y)), (torch_einsum, einc.einsum)),
    (lambda f, x, y: f("ij,jk->ik", [x, y]), (torch_einsum, einc.einsum)),
    # the sublist format: torch takes a proxy for an equation and records the call as written
    (lambda f, x, y: f(x, [0, 1], y, [1, 2], [0, 2]), (einc.einsum,))])
def test_fx_records_the_equation_then_the_operands_as_torch_does(call, functions):
    # e3nn's codegen calls torch.einsum(eq, (a, b)); opt_einsum_fx then reads node.args[1:] as tensors
    class M(torch.nn.Module):
        def __init__(self, f):
            super().__init__()
            self.f = f

        def forward(self, x, y):
            return call(self.f, x, y)

    nodes = {}
    for f in functions:
        gm = torch.fx.symbolic_trace(M(f))
        node = next(n for n in gm.graph.nodes if n.op == "call_function")
        assert isinstance(node.args[0], str) and len(node.args) == 3
        assert all(isinstance(a, torch.fx.Node) and a.op == "placeholder" for a in node.args[1:])
        nodes[f] = node
        x, y = torch.randn(2, 3), torch.randn(3, 4)
        torch.testing.assert_close(gm(x, y), x @ y)
    if torch_einsum in nodes:
        assert nodes[einc.einsum].args[0] == nodes[torch_einsum].args[0]


def test_a_torch_function_mode_and_a_subclass_see_the_call():
    seen = []

    class Mode(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    x, y = torch.randn(2, 3), torch.randn(3, 4)
    with Mode():
        out = einc.einsum(x, [0, 1], y, [1, 2], [0, 2])
    assert einc.einsum in seen
    torch.testing.assert_close(out, x @ y)

    class Sub(torch.Tensor):
        pass

    out = einc.einsum("ij,jk->ik", x.as_subclass(Sub), y)
    assert type(out) is Sub
    torch.testing.assert_close(out.as_subclass(torch.Tensor), x @ y)


_FIRST_USE_UNDER_A_MODE = """
import torch
import einc
seen = []
class Mode(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        seen.append(func is einc.einsum)
        return func(*args, **(kwargs or {}))
x, y = torch.randn(2, 3, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64)
with Mode():
    out = einc.einsum("ij,jk->ik", x, y)
assert torch.equal(out, torch.einsum("ij,jk->ik", x, y)), out
assert seen.count(True) == 1, seen
"""


def test_a_mode_that_reads_einc_einsum_at_einc_s_first_use():
    """einc's first use under a mode whose handler reads ``einc.einsum``: einc imports its
    front end with the modes off, so the handler sees the call once, and never einc's
    import-time torch calls (which would re-enter einc half-imported: a second registration
    of the op library raises)."""
    import pathlib
    import subprocess
    import sys
    root = pathlib.Path(__file__).resolve().parents[2]
    run = subprocess.run([sys.executable, "-c", _FIRST_USE_UNDER_A_MODE], capture_output=True, text=True,
                         timeout=300, cwd=root)
    assert run.returncode == 0, run.stderr[-3000:]


class _Seen(torch.overrides.TorchFunctionMode):
    """A mode that records the einsum calls it sees and calls them through."""
    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in (einc.einsum, torch.einsum):
            self.seen.append(func)
        return func(*args, **(kwargs or {}))


_XY = ((2, 3), (3, 4))


@pytest.mark.parametrize("eq, operands, kwargs, dispatched", [
    ("ij,jk->ik", _XY, {"optimize": 42}, False), ("ij,jk->ik", _XY, {"optimize": "bogus"}, False),
    ("ij,jk->ik", _XY, {"layout": "bogus"}, False), ("ij,jk->ik", _XY, {"select": "bogus"}, False),
    ("ij,jk->ik", _XY, {"memory_limit": "x"}, False), ("ij,jk->iz", _XY, {}, False),
    ("ij,jk->ik", ((2, 3), 5), {}, True), ("b (h d) -> b h d", ((2, 6),), {"h": 2, "layout": "bogus"}, False),
    ("b (h d) -> b h d", ((2, 6),), {"h": 4}, True),
], ids=["optimize-int", "optimize-name", "layout", "select", "memory_limit", "equation", "operand", "named-layout",
        "named-sizes"])
def test_a_torch_function_mode_gets_no_call_whose_equation_or_options_einc_refuses(eq, operands, kwargs,
                                                                                    dispatched):
    """A call in torch's notation has its equation and options checked before dispatch
    (docs/semantics.md, Errors): a bad one raises the eager call's error at the call, and
    the mode never sees it; so are a named call's options.  An operand that is no tensor, and a
    named call's sizes, are dispatched as written: the mode sees the call, and calling through
    raises eager's error."""
    args = (eq, *(torch.randn(s) if isinstance(s, tuple) else s for s in operands))
    with pytest.raises(einc.errors.EincError) as eager:
        einc.einsum(*args, **kwargs)
    with _Seen() as mode, pytest.raises(type(eager.value)) as moded:
        einc.einsum(*args, **kwargs)
    assert str(moded.value) == str(eager.value)
    assert mode.seen == ([einc.einsum] if dispatched else [])


def test_a_torch_function_mode_sees_torch_einsum_s_bad_equation():
    """torch.einsum checks only that its arguments bind before dispatch: its mode sees a bad
    equation, whose error comes as the mode calls through (the difference einc's docs state)."""
    with _Seen() as mode, pytest.raises(RuntimeError):
        torch.einsum("ij,jk->iz", torch.randn(2, 3), torch.randn(3, 4))
    assert mode.seen == [torch.einsum]


# ---------------------------------------------------------------- 3. TorchScript

def test_torch_jit_script_compiles_a_call_to_the_op():
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return einc.einsum("bij,bjk->bik", x, y) + einc.einsum("bij,bjk->bik", [x, y], optimize="greedy")

    s = torch.jit.script(f)
    assert "einc::einsum" in str(s.graph)
    for b in (0, 1, 3):
        x, y = torch.randn(b, 2, 5), torch.randn(b, 5, 4)
        torch.testing.assert_close(s(x, y), 2 * torch.bmm(x, y))


def _bool_product(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return einc.einsum("ij,jk->ik", x, y)


def _torch_bool_product(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.einsum("ij,jk->ik", x, y)


@pytest.mark.filterwarnings("ignore:`torch.jit.script:DeprecationWarning")
def test_a_scripted_call_s_error_is_torchscript_s_runtime_error_with_einc_s_text():
    """TorchScript makes an exception of a Python kernel its ``RuntimeError``
    (docs/semantics.md#errors): a product torch has no kernel for, ``NotImplementedError``
    from scripted torch.einsum and eagerly from einc, is a ``RuntimeError`` that is no
    ``NotImplementedError`` there, its text einc's class and message."""
    x, y = torch.ones(4, 5, dtype=torch.bool), torch.ones(5, 6, dtype=torch.bool)
    with pytest.raises(NotImplementedError):
        torch.jit.script(_torch_bool_product)(x, y)
    with pytest.raises(UnsupportedDtypeError):
        _bool_product(x, y)
    text = "UnsupportedDtypeError: .*torch.einsum cannot evaluate 'ij,jk->ik'"
    with pytest.raises(RuntimeError, match=text) as raised:
        torch.jit.script(_bool_product)(x, y)
    assert not isinstance(raised.value, NotImplementedError)


# ---------------------------------------------------------------- 4. torch.jit.trace

@pytest.mark.parametrize("eq,traced_at,run_at", [
    ("ij->i", [(3, 1)], [(3, 6)]), ("ij->i", [(3, 6)], [(3, 1)]), ("ij->i", [(2, 2)], [(0, 3)]),
    ("bij,bjk->bik", [(1, 1, 1), (1, 1, 1)], [(2, 3, 4), (2, 4, 5)]),
    ("ii->i", [(1, 1)], [(4, 4)]), ("i,j->ij", [(1,), (1,)], [(3,), (0,)])])
def test_torch_jit_trace_is_valid_at_every_shape(eq, traced_at, run_at):
    f = torch.jit.trace(lambda *ops: einc.einsum(eq, *ops), [torch.randn(s) for s in traced_at])
    assert "einc::einsum" in str(f.graph)
    ops = [torch.randn(s) for s in run_at]
    out, expected = f(*ops), torch_einsum(eq, *ops)
    assert out.shape == expected.shape
    torch.testing.assert_close(out, expected)


def test_torch_jit_trace_of_a_contract_expression_records_the_op():
    expr = einc.contract_expression("ij,jk,kl->il", (2, 3), (3, 4), (4, 1))
    f = torch.jit.trace(lambda a, b, c: expr(a, b, c), (torch.randn(2, 3), torch.randn(3, 4), torch.randn(4, 1)))
    assert "einc::einsum" in str(f.graph)
    ops = (torch.randn(2, 3), torch.randn(3, 4), torch.randn(4, 1))
    torch.testing.assert_close(f(*ops), ops[0] @ ops[1] @ ops[2])


def test_torch_jit_trace_of_an_expression_with_constants_runs_right_where_a_size_1_grows():
    # the constants were folded with a's size-1 j as an index of its own: a trace that kept
    # the folded run gave sum(a) * sum(c) at a j of 3
    c = torch.randn(3, 4, dtype=torch.float64)
    expr = einc.contract_expression("ij,jk->ik", (2, 1), c, constants=[1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        f = torch.jit.trace(lambda a: expr(a), (torch.randn(2, 1, dtype=torch.float64),))
    for shape in [(2, 3), (5, 3), (2, 1)]:
        a = torch.randn(shape, dtype=torch.float64)
        torch.testing.assert_close(f(a), torch_einsum("ij,jk->ik", a, c))
    a = torch.randn(2, 1, dtype=torch.float64)
    assert torch.equal(expr(a), expr(a)) and expr._runs[((2, 1),)] is type(expr)._run      # eager keeps its run


def test_the_doors_ask_one_question_whether_a_trace_records_the_call():
    """einc.named kept its own copy of einc.api's ``tracing`` (which it may not import):
    both doors ask einc.autograd's, true inside torch.jit.trace and torch.compile's trace."""
    from einc import api, autograd, named
    assert api.tracing is named.tracing is autograd.tracing and not hasattr(named, "_tracing")
    seen = []

    def record(x):
        seen.append(autograd.tracing())
        return x * 2
    assert not autograd.tracing()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # (the traced bool is a Python value: jit.trace warns of it)
        torch.jit.trace(record, (torch.ones(2),), check_trace=False)
    torch._dynamo.reset()
    torch.compile(record, backend="eager", fullgraph=True)(torch.ones(2))
    torch._dynamo.reset()
    assert seen == [True, True]


# ---------------------------------------------------------------- 5. make_fx and functionalize

SYMBOLIC = [("ij,jk->ik", [(3, 4), (4, 5)], [(6, 7), (7, 2)]), ("ij->ji", [(3, 4)], [(5, 2)]),
            ("ii->i", [(3, 3)], [(5, 5)]),
            ("bij,bjk,bkl->bil", [(2, 3, 4), (2, 4, 5), (2, 5, 6)], [(3, 2, 7), (3, 7, 1), (3, 1, 4)])]


@pytest.mark.parametrize("eq,traced_at,run_at", SYMBOLIC)
@pytest.mark.parametrize("requires_grad", [False, True])
def test_make_fx_symbolic_tracing_holds_at_every_shape(eq, traced_at, run_at, requires_grad):
    """make_fx with symbolic sizes (no number to plan with): the graph records torch's
    einsum, right at other shapes, with einc's contiguous result."""
    from torch.fx.experimental.proxy_tensor import make_fx
    traced = [torch.randn(s, dtype=torch.float64, requires_grad=requires_grad) for s in traced_at]
    gm = make_fx(lambda *ops: einc.einsum(eq, *ops), tracing_mode="symbolic")(*traced)
    ops = [torch.randn(s, dtype=torch.float64) for s in run_at]
    out = gm(*ops)
    assert out.is_contiguous()
    torch.testing.assert_close(out, torch_einsum(eq, *ops))


def test_functionalize_at_any_depth_of_the_transforms():
    """Under torch.func.functionalize, alone or around or inside vmap and grad, einc runs
    its plan of torch ops as is (functionalized), or torch's einsum where its autograd
    Function would run (it has no functionalize rule), and in-place writes on its result
    are functionalized."""
    from torch.func import functionalize, grad, vmap
    from torch.fx.experimental.proxy_tensor import make_fx
    a, b = torch.randn(3, 4, dtype=torch.float64), torch.randn(4, 5, dtype=torch.float64)
    stack = torch.randn(2, 3, 4, dtype=torch.float64)
    mm = lambda x, y: einc.einsum("ij,jk->ik", x, y)        # noqa: E731
    loss = lambda x, y: mm(x, y).sin().sum()                 # noqa: E731
    torch.testing.assert_close(functionalize(mm)(a, b), a @ b)
    torch.testing.assert_close(functionalize(vmap(mm, (0, None)))(stack, b), stack @ b)
    torch.testing.assert_close(vmap(functionalize(mm), (0, None))(stack, b), stack @ b)
    want = torch.cos(a @ b) @ b.T
    torch.testing.assert_close(grad(functionalize(loss))(a, b), want)
    torch.testing.assert_close(functionalize(grad(loss))(a, b), want)

    def written(x, y):
        z = einc.einsum("ij,jk->ik", x, y)
        z.add_(1.0)
        return einc.einsum("ik,ik->i", z, z)
    gm = make_fx(functionalize(written), tracing_mode="symbolic")(a, b)
    assert not any(str(n.target).endswith("_.Tensor") for n in gm.graph.nodes)     # no in-place op left
    x, y = torch.randn(5, 2, dtype=torch.float64), torch.randn(2, 3, dtype=torch.float64)
    torch.testing.assert_close(gm(x, y), ((x @ y + 1) ** 2).sum(1))


def test_onnx_export_of_a_model_calling_einc(tmp_path):
    """torch.onnx.export (the TorchScript exporter, which needs no onnxscript) records ONNX's
    Einsum where torch.einsum's would, and the exported model computes the same."""
    onnx = pytest.importorskip("onnx")
    from onnx.reference import ReferenceEvaluator

    class M(torch.nn.Module):
        def forward(self, x, y, z):
            return einc.einsum("bij,bjk,kl->bil", x, y, z)

    ops = (torch.randn(2, 3, 4), torch.randn(2, 4, 5), torch.randn(5, 6))
    path = tmp_path / "m.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(M(), ops, str(path), dynamo=False, input_names=["x", "y", "z"])
    model = onnx.load(str(path))
    assert "Einsum" in [n.op_type for n in model.graph.node]
    (out,) = ReferenceEvaluator(model).run(None, {k: o.numpy() for k, o in zip("xyz", ops)})
    torch.testing.assert_close(torch.from_numpy(out), torch_einsum("bij,bjk,kl->bil", *ops), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- 7. processes

_FORK_CALLS = [("ij,jk->ki", ((3, 4), (4, 5))), ("bij,bjk->bik", ((2, 3, 4), (2, 4, 5))), ("ii->i", ((4, 4),)),
               ("ab,bc,cd->da", ((2, 3), (3, 4), (4, 2)))]


def _fork_answers():
    """Each call of :data:`_FORK_CALLS`' result and gradients, on operands of a fixed seed."""
    g = torch.Generator().manual_seed(0)
    out = []
    for eq, shapes in _FORK_CALLS:
        ops = [torch.randn(s, generator=g, dtype=torch.float64).requires_grad_() for s in shapes]
        y = einc.einsum(eq, *ops)
        out.append((y.detach(), torch.autograd.grad(y.sum(), ops)))
    return out


def _fork_child(queue):
    import io
    torch.set_num_threads(1)        # as a DataLoader's worker (torch's own ops may hang otherwise)
    buffer = io.BytesIO()
    torch.save(_fork_answers(), buffer)
    queue.put(buffer.getvalue())    # (bytes: the queue's tensors would go by shared memory)


def _fork_and_compare():
    """The parent runs :data:`_FORK_CALLS`, forks a child that runs them again, and compares."""
    import io
    import multiprocessing
    parent = _fork_answers()
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_fork_child, args=(queue,))
    child.start()
    try:
        got = torch.load(io.BytesIO(queue.get(timeout=60)))
    finally:
        child.join(10)
        if child.is_alive():
            child.kill()
    for (y, grads), (y2, grads2) in zip(parent, got):
        assert torch.equal(y, y2) and all(torch.equal(a, b) for a, b in zip(grads, grads2))


def test_a_forked_child_after_the_parent_used_einc_gives_the_parents_bits():
    """A child forked after the parent planned and ran the same calls (a DataLoader's worker):
    it returns, with the parent's answers and gradients, bit for bit.  The parent is a fresh
    interpreter: torch's CUDA builds refuse autograd in any child forked after some earlier
    tests' compiles started autograd's threads in this one, whatever einc does."""
    import pathlib
    import subprocess
    import sys
    code = "from tests.doors.test_machinery import _fork_and_compare; _fork_and_compare()"
    root = pathlib.Path(__file__).resolve().parents[2]
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=root)
    assert run.returncode == 0, run.stderr[-3000:]


class _Pairs(torch.utils.data.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return einc.einsum("ij,jk->ik", torch.randn(3, 4, generator=g), torch.randn(4, 5, generator=g))


def _collate(items):
    x = torch.stack(items)
    return einc.einsum("bij,bkj->bik", x, x), einc.contract("bii->bi", x[:, :3, :3])


def test_a_dataloaders_workers_call_einc_in_the_dataset_and_the_collate():
    einc.einsum("ij,jk->ik", torch.randn(3, 4), torch.randn(4, 5))      # the parent used einc first
    expected = list(torch.utils.data.DataLoader(_Pairs(), batch_size=4, collate_fn=_collate))
    loader = torch.utils.data.DataLoader(_Pairs(), batch_size=4, collate_fn=_collate, num_workers=2,
                                         multiprocessing_context="fork", timeout=60)
    got = list(loader)
    assert len(got) == len(expected) == 2
    for batch, want in zip(got, expected):
        assert all(torch.equal(a, b) for a, b in zip(batch, want))
