"""einc installed as torch.einsum, the way a user drops it into a library: a battery of
real-library-style code, each case compared with torch's own einsum.

Run as a script (``python tests/support/patched_battery.py``) by ``tests/doors/test_patched.py``, in a
process of its own, since the patch changes ``torch.einsum`` for everything after it.
Prints one line per case: ``ok <name>`` or ``FAIL <name>: <why>``, then a summary line;
exits 1 when a case fails.  Each case runs with a deadline: a hang is a failure, not a
stuck test run.
"""

import copy
import io
import os
import pickle
import sys
import tempfile
import threading
import traceback

import torch
import torch.fx
import torch.utils.checkpoint

torch_einsum = torch.einsum             # torch's own, taken before the patch
import einc  # noqa: E402

torch.einsum = einc.einsum
torch.functional.einsum = einc.einsum

CASES = []


def case(fn):
    CASES.append(fn)
    return fn


def close(actual, expected, **kw):
    assert type(actual) is type(expected) or isinstance(actual, type(expected)), (type(actual), type(expected))
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    torch.testing.assert_close(actual, expected, **kw)


def randn(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=torch.float64).to(dtype)


# --------------------------------------------------------------- dtypes (the deadlock)

@case
def integer_bool_and_mixed_dtypes():
    a, b = torch.randint(0, 5, (3, 4)), torch.randint(0, 5, (4, 5))
    for eq, ops in [("ij,jk->ik", (a, b)), ("ij->j", (a,)), ("ij,jk->ik", (a.bool(), b.bool())),
                    ("ij,jk->ik", (a.to(torch.int32), b)), ("ij,jk->ik", (a.float(), b.double())),
                    ("i,i->", (a[0].to(torch.int8), b[:, 0].to(torch.int8))), ("ii->i", (a[:3, :3].bool(),)),
                    ("ij,kl->ijkl", (a.to(torch.uint8), b.to(torch.int16)))]:
        same(eq, *ops)


def same(eq, *ops):
    """torch.einsum (einc now) and torch's own agree: the same result, or both raise an
    exception of the same built-in type."""
    try:
        expected = torch_einsum(eq, *ops)
    except Exception as e:      # noqa: BLE001 - einc must raise alike
        builtin = next(t for t in type(e).__mro__ if t.__module__ == "builtins")
        try:
            torch.einsum(eq, *ops)
        except builtin:
            return
        raise AssertionError(f"torch raised {type(e).__name__}, einc did not raise alike") from None
    close(torch.einsum(eq, *ops), expected)


# --------------------------------------------------------------- torch.fx

class Bilinear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(randn(4, 5, 6))

    def forward(self, x, y):
        return torch.einsum("bi,ioj,bj->bo", x, self.w, y)


@case
def fx_symbolic_trace_records_one_node():
    m = Bilinear()
    gm = torch.fx.symbolic_trace(m)
    calls = [n for n in gm.graph.nodes if n.op == "call_function"]
    assert [n.target for n in calls] == [einc.einsum], [n.target for n in calls]
    x, y = randn(3, 4), randn(3, 6)
    close(gm(x, y), torch_einsum("bi,ioj,bj->bo", x, m.w, y))
    gm.graph.lint()
    gm.recompile()
    close(gm(randn(0, 4), randn(0, 6)), torch.zeros(0, 5))


@case
def fx_proxy_in_list_and_sublist_forms():
    def f(x, y):
        return torch.einsum("ij,jk->ik", [x, y]) + torch.einsum(x, [0, 1], y, [1, 2], [0, 2])
    gm = torch.fx.symbolic_trace(f)
    assert sum(n.target is einc.einsum for n in gm.graph.nodes) == 2
    x, y = randn(2, 3), randn(3, 4)
    close(gm(x, y), 2 * torch_einsum("ij,jk->ik", x, y))


# --------------------------------------------------------------- TorchScript

@case
def script_a_function_and_a_module():
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.einsum("bij,bjk->bik", x, y)

    s = torch.jit.script(f)
    assert "einc::einsum" in str(s.graph), s.graph
    for b, i in [(2, 3), (1, 1), (0, 4)]:
        x, y = randn(b, i, 5), randn(b, 5, 2)
        close(s(x, y), torch_einsum("bij,bjk->bik", x, y))

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(randn(5, 6))

        def forward(self, x):
            return torch.einsum("...i,ij->...j", x, self.w).relu()

    sm = torch.jit.script(M())
    x = randn(2, 3, 5)
    close(sm(x), torch_einsum("...i,ij->...j", x, sm.w).relu())
    buf = io.BytesIO()
    torch.jit.save(sm, buf)
    buf.seek(0)
    close(torch.jit.load(buf)(x), torch_einsum("...i,ij->...j", x, sm.w).relu())


@case
def script_with_the_list_form_and_optimize():
    def f(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return einc.einsum("ij,jk,kl->il", [x, y, z]) + einc.einsum("ij,jk,kl->il", x, y, z, optimize="greedy")

    s = torch.jit.script(f)
    x, y, z = randn(2, 3), randn(3, 4), randn(4, 5)
    close(s(x, y, z), 2 * torch_einsum("ij,jk,kl->il", x, y, z))


# --------------------------------------------------------------- torch.jit.trace

@case
def trace_at_one_shape_run_at_others():
    for eq, traced_at, run_at in [
            ("ij->i", [(3, 1)], [[(3, 6)], [(3, 0)], [(0, 2)], [(1, 1)]]),
            ("bij,bjk->bik", [(1, 1, 1), (1, 1, 1)], [[(2, 3, 4), (2, 4, 5)], [(3, 0, 2), (3, 2, 1)]]),
            ("ii->i", [(1, 1)], [[(4, 4)]]),
            ("bi,bi->b", [(2, 1), (2, 1)], [[(5, 7), (5, 7)], [(5, 7), (1, 7)]])]:
        f = torch.jit.trace(lambda *ops, eq=eq: torch.einsum(eq, *ops), [randn(*s) for s in traced_at])
        assert "einc::einsum" in str(f.graph), f.graph
        for shapes in run_at:
            ops = [randn(*s) for s in shapes]
            close(f(*ops), torch_einsum(eq, *ops))


@case
def trace_a_module_and_backward():
    m = Bilinear()
    t = torch.jit.trace(m, (randn(1, 4), randn(1, 6)))
    x, y = randn(5, 4, dtype=torch.float32).requires_grad_(), randn(5, 6)
    out = t(x, y)
    out.sum().backward()
    x2 = x.detach().clone().requires_grad_()
    torch_einsum("bi,ioj,bj->bo", x2, m.w, y).sum().backward()
    close(x.grad, x2.grad)


# --------------------------------------------------------------- __torch_function__

@case
def torch_function_mode_sees_the_call():
    seen = []

    class Mode(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    x, y = randn(2, 3), randn(3, 4)
    with Mode():
        out = torch.einsum("ij,jk->ik", x, y)
    assert einc.einsum in seen, seen
    close(out, torch_einsum("ij,jk->ik", x, y))


class Tagged(torch.Tensor):
    """A tensor subclass that keeps its type through torch functions (as e.g. a units or
    named-tensor library does)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return super().__torch_function__(func, types, args, kwargs or {})


@case
def tensor_subclass_keeps_its_type():
    x, y = randn(2, 3).as_subclass(Tagged), randn(3, 4)
    out = torch.einsum("ij,jk->ik", x, y)
    assert type(out) is Tagged, type(out)
    torch.testing.assert_close(out.as_subclass(torch.Tensor), torch_einsum("ij,jk->ik", x.as_subclass(torch.Tensor), y))


# --------------------------------------------------------------- autograd machinery

@case
def checkpoint_gives_the_same_gradients():
    w = randn(6, 6).requires_grad_()

    def block(x):
        return torch.einsum("bi,ij->bj", torch.einsum("bi,ij->bj", x, w).tanh(), w)

    x = randn(4, 6).requires_grad_()
    torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False).sum().backward()
    gx, gw = x.grad, w.grad
    x.grad = w.grad = None
    torch.einsum = torch_einsum
    try:
        block(x).sum().backward()
    finally:
        torch.einsum = einc.einsum
    close(gx, x.grad)
    close(gw, w.grad)


@case
def saved_tensors_hooks_see_what_is_saved():
    packed = []

    def pack(t):
        packed.append(t.shape)
        return t.clone()

    x, w = randn(3, 4).requires_grad_(), randn(4, 5).requires_grad_()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = torch.einsum("ij,jk->ik", x, w)
    out.sum().backward()
    assert packed, "no tensor was saved through the hooks"
    close(x.grad, torch.ones(3, 5) @ w.detach().t())


@case
def inference_mode_and_functional_call():
    m = Bilinear()
    x, y = randn(2, 4), randn(2, 6)
    with torch.inference_mode():
        out = m(x, y)
        assert out.is_inference()
    w = randn(4, 5, 6)
    close(torch.func.functional_call(m, {"w": w}, (x, y)), torch_einsum("bi,ioj,bj->bo", x, w, y))
    grads = torch.func.grad(lambda w: torch.func.functional_call(m, {"w": w}, (x, y)).sum())(w)
    close(grads, torch_einsum("bi,bj->ij", x, y)[:, None, :].expand(4, 5, 6))


@case
def vmap_and_jacrev():
    x, w = randn(7, 3, 4), randn(4, 5)
    close(torch.func.vmap(lambda a: torch.einsum("ij,jk->ik", a, w))(x), torch_einsum("bij,jk->bik", x, w))
    j = torch.func.jacrev(lambda a: torch.einsum("ij,jk->ik", a, w))(x[0])
    torch.testing.assert_close(j, torch.autograd.functional.jacobian(lambda a: a @ w, x[0]))


# --------------------------------------------------------------- modules holding einc objects

class Holder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.expr = einc.contract_expression("ij,jk->ik", (2, 3), (3, 4))
        self.w = torch.nn.Parameter(randn(3, 4))

    def forward(self, x):
        return self.expr(x, self.w)


@case
def deepcopy_and_pickle_of_modules_holding_expressions():
    m = Holder()
    x = randn(2, 3)
    expected = torch_einsum("ij,jk->ik", x, m.w)
    close(copy.deepcopy(m)(x), expected)
    close(pickle.loads(pickle.dumps(m))(x), expected)


# --------------------------------------------------------------- torch.export

@case
def export_save_load_round_trip():
    m = Bilinear()
    x, y = randn(3, 4), randn(3, 6)
    batch = torch.export.Dim("batch", min=1)
    ep = torch.export.export(m, (x, y), dynamic_shapes=({0: batch}, {0: batch}))
    assert any("einc.einsum" in str(n.target) for n in ep.graph.nodes), ep.graph
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.pt2")
        torch.export.save(ep, path)
        loaded = torch.export.load(path)
    for b in (3, 1, 8):
        x, y = randn(b, 4), randn(b, 6)
        close(loaded.module()(x, y), torch_einsum("bi,ioj,bj->bo", x, m.w, y))


# --------------------------------------------------------------- threads

@case
def threads_with_mixed_keys():
    errors = []
    work = [("ij,jk->ik", (randn(3, 4), randn(4, 5))),
            ("ij,jk->ik", (torch.randint(0, 3, (3, 4)), torch.randint(0, 3, (4, 2)))),
            ("bi,bi->b", (randn(5, 6), randn(5, 6))), ("ij->j", (torch.randint(0, 3, (2, 4)).bool(),)),
            ("ab,bc,cd->ad", (randn(2, 3), randn(3, 4), randn(4, 5)))]

    def worker(k):
        try:
            for _ in range(20):
                eq, ops = work[k % len(work)]
                close(torch.einsum(eq, *ops), torch_einsum(eq, *ops))
        except Exception:       # noqa: BLE001 - reported below
            errors.append(traceback.format_exc())

    threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert not errors, errors[0]


@case
def shapes_that_change_every_call():
    for n in range(1, 40):
        x, y = randn(n, 3, 4), randn(n, 5, 6)
        close(torch.einsum("zui,zvj->zuvij", x, y), torch_einsum("zui,zvj->zuvij", x, y))
        a, b, c = randn(n, 4, 4, 4), randn(n, 4), randn(n, 4, 6)
        close(torch.einsum("zuvw,zu,zvj->zwj", a, b, c), torch_einsum("zuvw,zu,zvj->zwj", a, b, c),
              rtol=1e-4, atol=1e-4)


@case
def compiled_calls_raise_the_eager_error():
    """Patched, torch.einsum is einc's, which dynamo records as a node of torch's own and runs
    on fake tensors: an error there came as dynamo's TorchRuntimeError without fullgraph.  A
    product torch has no kernel for (bool) is a NotImplementedError, which dynamo made its own
    Unsupported under fullgraph: the node is kept, and raises einc's error when it runs."""
    if torch.__version__ < (2, 13):
        # torch 2.11's run of the node wraps it still (docs/autograd-and-compile.md), and its fake
        # mode crashes the process entering it here after the export case's thread
        return
    calls = [(lambda a, b, o: torch.einsum("ij,jk->ik", a, b, out=o),
              (randn(2, 3), randn(3, 4), torch.zeros(2, 4, dtype=torch.float64))),
             (lambda x: torch.einsum("b (h d -> b", x, h=2), (randn(3, 4),)),
             (lambda a, b: torch.einsum("ij,jk->ik", a, b), (randn(2, 3) > 0, randn(3, 4) > 0))]
    for fn, args in calls:
        want = _raised(fn, args)
        for fullgraph, backend in [(False, "eager"), (True, "eager"), (True, "aot_eager")]:
            torch._dynamo.reset()
            got = _raised(torch.compile(fn, backend=backend, fullgraph=fullgraph), args)
            assert type(got).__name__ == type(want).__name__ and str(got) == str(want), (fullgraph, got, want)
            assert isinstance(got, type(want)), (fullgraph, backend, type(got).__mro__)
    torch._dynamo.reset()


def _raised(fn, args):
    try:
        fn(*args)
    except einc.errors.EincError as error:
        return error
    raise AssertionError("no einc error")


def run_case(fn, deadline=120.0):
    """``fn()`` in a daemon thread: None when it passed, else why it failed (a hang included)."""
    result = []

    def target():
        try:
            fn()
            result.append(None)
        except BaseException:     # noqa: BLE001 - reported
            result.append(traceback.format_exc(limit=6))

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(deadline)
    if t.is_alive():
        return f"did not finish in {deadline:.0f} s (a hang)"
    return result[0]


def main(names=()) -> int:
    failed = 0
    for fn in CASES:
        if names and fn.__name__ not in names:
            continue
        why = run_case(fn)
        if why is None:
            print(f"ok {fn.__name__}", flush=True)
        else:
            failed += 1
            print(f"FAIL {fn.__name__}: {why}", flush=True)
    ran = len([fn for fn in CASES if not names or fn.__name__ in names])
    print(f"battery: {ran - failed} passed, {failed} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.stdout.flush()
    os._exit(main(sys.argv[1:]))
