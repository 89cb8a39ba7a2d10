"""A call's later steps write into the memory of the intermediates it has deleted
(runtime/torch_executor/reuse.py, opened by runtime/program.py): only memory the call
allocated and nothing holds, never in the last step, never where autograd records or a
mode watches, one call's blocks its own; the same bits as without."""

import os
import threading

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import einc
from einc.runtime import program
from einc.runtime.torch_executor import reuse

pytestmark = pytest.mark.usefixtures("cleared_caches")

EQ = "ab,bc,cd,de,ef->af"       # run left to right: each product 512 x 512 float64, 2 MiB


def _chain(seed=0, n=512, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(n, n, generator=gen, dtype=dtype) / n ** 0.5 for _ in range(5)]


def _spied(monkeypatch):
    """``[(whether the block was one the call had made before, its storage's address)]``
    for each tensor the calls' blocks hand out from now on (a new block renews the list
    of those held)."""
    seen, take = [], reuse.Blocks.take

    def spy(self, shape, dtype, device):
        held = self.held
        out = take(self, shape, dtype, device)
        seen.append((self.held is held, out.untyped_storage().data_ptr()))
        return out
    monkeypatch.setattr(reuse.Blocks, "take", spy)
    return seen


def _oracle(ops):
    return torch.einsum(EQ, *[o.double() for o in ops])


def test_a_later_step_takes_a_dead_intermediates_memory_with_the_same_bits(monkeypatch):
    ops = _chain()
    seen = _spied(monkeypatch)
    got = einc.einsum(EQ, *ops, optimize=False)
    assert any(again for again, _ in seen)      # T3 = T2 C in T1's memory
    monkeypatch.setattr(reuse.Blocks, "usable", False)
    count = len(seen)
    plain = einc.einsum(EQ, *ops, optimize=False)
    assert len(seen) == count                   # (no blocks opened)
    assert torch.equal(got, plain)
    torch.testing.assert_close(got, _oracle(ops), rtol=1e-12, atol=1e-12)


def test_the_compiled_run_reuses_too_with_the_same_bits(monkeypatch):
    ops = _chain(1)
    first = einc.einsum(EQ, *ops, optimize=False)
    for _ in range(program.CALLS_BEFORE_CODE + 2):
        einc.einsum(EQ, *ops, optimize=False)
    seen = _spied(monkeypatch)
    assert torch.equal(einc.einsum(EQ, *ops, optimize=False), first)
    assert any(again for again, _ in seen)


def test_the_result_is_never_in_the_calls_blocks(monkeypatch):
    """Of the four products (2 MiB each), the last one, the result, takes no block (a dead
    2 MiB one is there): a block's would be the call's memory handed to the caller."""
    ops = _chain(2)
    seen = _spied(monkeypatch)
    got = einc.einsum(EQ, *ops, optimize=False)
    assert len(seen) == 3 and seen[-1][0]                                       # T3 in T1's block
    assert torch._C._storage_Use_Count(got.untyped_storage()._cdata) == 2      # got and the wrapper asked for
    again = einc.einsum(EQ, *ops, optimize=False)
    assert torch.equal(got, again) and got.data_ptr() != again.data_ptr()


def test_the_last_step_runs_with_no_free_block_held(monkeypatch):
    """The call's dead blocks go back to the allocator before the last step allocates the
    result (a free 2 MiB block, T2's, would be held beside it)."""
    opened, free, make, spare = [], [], reuse.make_current, reuse.spare

    def making(blocks):
        if blocks is not None and not opened:
            opened.append(blocks)
        return make(blocks)

    def sparing(shape, dtype, device):
        if reuse.current() is reuse.FRESH and opened:      # the last step's product
            free.append(sum(torch._C._storage_Use_Count(s._cdata) == 1 for s, _ in opened[0].held))
        return spare(shape, dtype, device)
    monkeypatch.setattr(reuse, "make_current", making)
    monkeypatch.setattr(reuse, "spare", sparing)
    einc.einsum(EQ, *_chain(6), optimize=False)
    assert opened and free == [0]


def test_operands_are_untouched_views_of_them_too(monkeypatch):
    gen = torch.Generator().manual_seed(3)
    big = torch.randn(512, 5 * 512, generator=gen, dtype=torch.float64) / 512 ** 0.5
    kept = big.clone()
    ops = [big[:, 512 * k:512 * (k + 1)] for k in range(5)]
    seen = _spied(monkeypatch)
    for _ in range(3):
        got = einc.einsum(EQ, *ops, optimize=False)
    assert any(again for again, _ in seen)
    assert torch.equal(big, kept)
    torch.testing.assert_close(got, _oracle(ops), rtol=1e-12, atol=1e-12)


def test_no_blocks_where_autograd_records(monkeypatch):
    """Autograd saves the steps' operands for the backward: none may be written again."""
    ops = _chain(4)
    ops[1].requires_grad_()
    seen = _spied(monkeypatch)
    got = einc.einsum(EQ, *ops, optimize=False)
    assert seen == []
    got.sum().backward()
    want = _chain(4)
    want[1].requires_grad_()
    torch.einsum(EQ, *want).sum().backward()
    torch.testing.assert_close(ops[1].grad, want[1].grad, rtol=1e-12, atol=1e-12)
    with torch.no_grad():                       # nothing records: the call may reuse
        einc.einsum(EQ, *ops, optimize=False)
    assert any(again for again, _ in seen)


def test_no_blocks_under_a_dispatch_mode(monkeypatch):
    """A mode sees the ops as they run without (no ``out=`` forms)."""
    ops = _chain(5)
    want = einc.einsum(EQ, *ops, optimize=False)
    names = []

    class Logging(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            names.append(str(func))
            return func(*args, **(kwargs or {}))
    seen = _spied(monkeypatch)
    with Logging():
        got = einc.einsum(EQ, *ops, optimize=False)
    assert seen == [] and "aten.mm.default" in names and not any(n.endswith(".out") for n in names)
    assert torch.equal(got, want)


def test_threads_calling_the_same_plan_share_no_blocks():
    """A call's blocks are current on its own thread only; calls at once give their answers."""
    mine, theirs = reuse.Blocks(), []
    before = reuse.make_current(mine)
    try:
        other = threading.Thread(target=lambda: theirs.append(reuse.current()))
        other.start()
        other.join()
        assert reuse.current() is mine and theirs == [None]
    finally:
        reuse.make_current(before)
    inputs = [_chain(10 + k) for k in range(4)]
    want = [einc.einsum(EQ, *ops, optimize=False) for ops in inputs]
    bad = []

    def work(k):
        for _ in range(15):
            got = einc.einsum(EQ, *inputs[k], optimize=False)
            if not torch.equal(got, want[k]):
                bad.append(k)
    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert bad == []


def test_a_block_is_handed_out_only_free_of_the_dtype_and_large_enough():
    """A miss drops the free blocks (they fit no request so far) before it makes one."""
    cpu, f64, c128 = torch.device("cpu"), torch.float64, torch.complex128
    blocks = reuse.Blocks()
    a = blocks.take((1 << 17,), f64, cpu)                   # 1 MiB
    b = blocks.take((1 << 17,), f64, cpu)
    assert a.data_ptr() != b.data_ptr() and len(blocks.held) == 2      # a is alive
    address = a.data_ptr()
    del a
    view = blocks.take((1 << 16,), f64, cpu)                # free, large enough: a's
    assert view.data_ptr() == address and len(blocks.held) == 2
    c = blocks.take((1 << 16,), f64, cpu)                   # a's held by view: a new one
    assert c.data_ptr() != address and len(blocks.held) == 3
    del view
    d = blocks.take((1 << 16,), c128, cpu)                  # a's free, another dtype: dropped, a new one
    assert [dt for _, dt in blocks.held] == [f64, f64, c128] and d.dtype == c128
    del c
    e = blocks.take((1 << 18,), f64, cpu)                   # c's free, too small
    assert [dt for _, dt in blocks.held] == [f64, c128, f64] and e.untyped_storage().nbytes() == 1 << 21
    del b, d, e


def test_small_requests_and_calls_use_no_blocks(monkeypatch):
    assert reuse.spare((8, 8), torch.float64, torch.device("cpu")) is None     # no call's blocks current
    before = reuse.make_current(reuse.Blocks())
    try:
        assert reuse.spare((8, 8), torch.float64, torch.device("cpu")) is None  # below MIN_BYTES
        assert reuse.spare((1 << 17,), torch.float64, torch.device("cpu")) is not None
        assert reuse.spare((1 << 17,), torch.float64, torch.device("meta")) is None      # the CPU's only
    finally:
        reuse.make_current(before)
    seen = _spied(monkeypatch)
    einc.einsum("ab,bc,cd->ad", *[torch.randn(16, 16, dtype=torch.float64)] * 3, optimize=False)
    assert seen == []


def test_a_compiled_copy_writes_into_a_free_block():
    """The compiled copies' kernels (runtime/torch_executor/compiled_copy.py) take a block too:
    here one that moves the bytes as they are."""
    import ctypes

    from einc.runtime.torch_executor import compiled_copy
    kernel = object.__new__(compiled_copy._Kernel)
    kernel.shape, kernel.dtype = (1 << 17,), torch.float64
    kernel.kernel = lambda src, dst: ctypes.memmove(dst, src, (1 << 17) * 8)
    x = torch.randn(1 << 17, dtype=torch.float64)
    blocks = reuse.Blocks()
    address = blocks.take((1 << 17,), torch.float64, torch.device("cpu")).data_ptr()   # (dead at once)
    before = reuse.make_current(blocks)
    try:
        got = kernel(x)
    finally:
        reuse.make_current(before)
    assert got.data_ptr() == address and torch.equal(got, x)
    assert kernel(x).data_ptr() != address     # no call's blocks: its own


COPIES = [("abc", "cba", (128, 64, 64), torch.float64),      # tiles
          ("abc", "cab", (64, 64, 128), torch.float64),      # a 2-D transpose of blocks
          ("abc", "bac", (1024, 256, 4), torch.float32),     # wide elements, a 2-D transpose
          ("abcd", "bacd", (256, 256, 4, 4), torch.float16),     # wide elements
          ("abc", "acb", (64, 64, 64), torch.complex128)]    # the plain copy


@pytest.mark.parametrize("src, dst, shape, dtype", COPIES, ids=lambda c: str(c))
def test_a_large_permuting_copy_and_a_reshape_copy_take_the_calls_memory(src, dst, shape, dtype):
    """However einc's copy runs, a copy of 1 MiB or more is made by the current call's
    blocks; the same bits as torch's."""
    from einc.runtime.torch_executor.permute_copy import permuted_copy
    x = torch.randn(shape, dtype=torch.float64).to(dtype)
    copy = permuted_copy(list(src), list(dst), dict(zip(src, shape)))
    perm = tuple(src.index(i) for i in dst)
    blocks = reuse.Blocks()
    before = reuse.make_current(blocks)
    try:
        got = copy(x)
        flat = reuse.reshaped(x.permute(perm), (-1,))
    finally:
        reuse.make_current(before)
    held = {s.data_ptr() for s, _ in blocks.held}
    assert got.untyped_storage().data_ptr() in held and flat.untyped_storage().data_ptr() in held
    want = x.permute(perm).contiguous()
    assert torch.equal(got.view(torch.uint8), want.view(torch.uint8)) and got.is_contiguous()
    assert torch.equal(flat.view(torch.uint8), want.view(-1).view(torch.uint8))


def test_an_operand_layouts_copy_takes_the_calls_memory(monkeypatch):
    """A step whose operand's layout is no view of it (here each 64^3 operand, read as a
    matrix with its middle index last) copies it into the call's blocks; the same bits as
    without."""
    eq = "abc,bd,ce,ef->adf"
    gen = torch.Generator().manual_seed(7)
    ops = [torch.randn(s, generator=gen, dtype=torch.float64) / 8 for s in [(64, 64, 64), (64, 64), (64, 64), (64, 64)]]
    copies, reshaped = [], reuse.reshaped

    def spy(x, shape):
        out = reshaped(x, shape)
        held = {s.data_ptr() for s, _ in reuse.current().held} if reuse.current() is not None else set()
        copies.append(out.untyped_storage().data_ptr() in held)
        return out
    monkeypatch.setattr(reuse, "reshaped", spy)
    got = einc.einsum(eq, *ops, optimize=False)
    assert copies and all(copies)
    monkeypatch.setattr(reuse.Blocks, "usable", False)
    assert torch.equal(got, einc.einsum(eq, *ops, optimize=False))
    torch.testing.assert_close(got, torch.einsum(eq, *ops), rtol=1e-12, atol=1e-12)


def test_no_free_block_is_held_while_a_step_allocates_outside_spare(monkeypatch):
    """A step that allocates its result itself (here an elementwise product) runs with no
    dead intermediate's memory held: T1 (A B), dead after T2 = T1 D, would be a free 2
    MiB block beside T3 = T2 * E.  Counted at each large allocation that does not come
    from the blocks, under a mode that sees the ops (the call's blocks opened for it)."""
    seen, taking, take = [], [0], reuse.Blocks.take

    def counted(self, shape, dtype, device):
        taking[0] += 1
        try:
            return take(self, shape, dtype, device)
        finally:
            taking[0] -= 1

    class Allocations(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            blocks = reuse.current()
            free = 0 if blocks is None else sum(
                s.nbytes() for s, _ in blocks.held if torch._C._storage_Use_Count(s._cdata) == 1)
            out = func(*args, **(kwargs or {}))
            reads = {a.untyped_storage().data_ptr() for a in args if isinstance(a, torch.Tensor)}
            if not taking[0] and "out" not in (kwargs or {}) and isinstance(out, torch.Tensor) \
                    and out.untyped_storage().data_ptr() not in reads \
                    and out.untyped_storage().nbytes() >= reuse.MIN_BYTES:      # (not a view, not copy_)
                seen.append((str(func), free))
            return out
    monkeypatch.setattr(reuse.Blocks, "take", counted)
    monkeypatch.setattr(program, "_may_reuse", lambda ops: True)
    ops = _chain(7)
    path = [(0, 1), (0, 3), (0, 2), (0, 1)]     # T1 = A B, T2 = T1 D, T3 = E * T2, T3 F
    eq = "ab,bc,cd,ad,de->ae"
    plain = einc.einsum(eq, *ops, optimize=path)
    with Allocations():
        got = einc.einsum(eq, *ops, optimize=path)
    assert ("aten.mul.Tensor", 0) in seen and all(free == 0 for _, free in seen), seen
    assert torch.equal(got, plain)


def _advised(monkeypatch):
    """The ranges ``madvise`` is asked to give huge pages from now on: ``[(start, length, advice)]``."""
    calls = []

    def madvise(start, length, advice):
        calls.append((start, length, advice))
        return 0
    monkeypatch.setattr(reuse, "_madvise", lambda: madvise)
    return calls


def test_a_new_large_block_asks_for_huge_pages_under_its_aligned_part(monkeypatch):
    monkeypatch.delenv("EINC_HUGE_PAGES", raising=False)
    calls = _advised(monkeypatch)
    cpu, f64 = torch.device("cpu"), torch.float64
    blocks = reuse.Blocks()
    small = blocks.take((1 << 18,), f64, cpu)               # 2 MiB: below HUGE_BYTES
    assert calls == []
    middle = blocks.take((1 << 21,), f64, cpu)              # 16 MiB: below HUGE_BYTES (glibc's heap)
    assert calls == []
    big = blocks.take((5 << 20,), f64, cpu)                 # 40 MiB, new
    [(start, length, advice)] = calls
    begin = big.untyped_storage().data_ptr()
    assert advice == reuse.mmap.MADV_HUGEPAGE and start % reuse.HUGE_PAGE == 0 and length % reuse.HUGE_PAGE == 0
    assert begin <= start and start + length <= begin + (40 << 20) and length >= (40 << 20) - 2 * reuse.HUGE_PAGE
    address = big.data_ptr()
    del big
    again = blocks.take((1 << 22,), f64, cpu)               # the free 40 MiB block: already advised
    assert again.data_ptr() == address and len(calls) == 1
    monkeypatch.setenv("EINC_HUGE_PAGES", "off")
    other = blocks.take((5 << 20,), f64, cpu)               # new, but turned off
    assert len(calls) == 1
    del small, middle, again, other


WIDE = "ab,bc,cd->ad"       # left to right: a 2048 x 2048 float64 intermediate (32 MiB), a 2048 x 16 result


def _wide(seed):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=gen, dtype=torch.float64) for s in ((2048, 16), (16, 2048), (2048, 16))]


def test_huge_pages_leave_the_bits_and_a_bad_setting_is_refused_when_planning(monkeypatch):
    ops = _wide(2)
    calls = _advised(monkeypatch)
    monkeypatch.setenv("EINC_HUGE_PAGES", "on")
    got = einc.einsum(WIDE, *ops, optimize=False)
    assert calls                                            # the 32 MiB intermediate's block
    monkeypatch.setenv("EINC_HUGE_PAGES", "off")
    count = len(calls)
    assert torch.equal(einc.einsum(WIDE, *ops, optimize=False), got) and len(calls) == count
    torch.testing.assert_close(got, torch.einsum(WIDE, *ops), rtol=1e-12, atol=1e-12)
    monkeypatch.setenv("EINC_HUGE_PAGES", "maybe")
    with pytest.raises(einc.errors.ConfigError, match="EINC_HUGE_PAGES"):
        einc.einsum("ab,bc->ac", torch.randn(3, 4), torch.randn(4, 5))     # a new key: its settings checked


@pytest.mark.skipif(reuse._madvise() is None or not os.path.exists("/sys/kernel/mm/transparent_hugepage/enabled"),
                    reason="Linux 4.6 or newer with transparent huge pages")
def test_the_kernel_takes_the_advice(monkeypatch):
    monkeypatch.delenv("EINC_HUGE_PAGES", raising=False)
    block = torch.empty(1 << 22, dtype=torch.float64)       # 32 MiB, not yet written
    assert reuse.huge_pages(block)
    assert not reuse.huge_pages(torch.empty(1 << 18, dtype=torch.float64))     # 2 MiB: not asked


def _within(calls, tensor):
    start, nbytes = tensor.untyped_storage().data_ptr(), tensor.untyped_storage().nbytes()
    return [c for c in calls if start <= c[0] and c[0] + c[1] <= start + nbytes]


def test_a_large_result_is_made_on_huge_pages_where_the_call_could_hold_blocks(monkeypatch):
    """The one step of a one-step plan, and the last step of a longer one, make a result of
    32 MiB or more themselves, with huge pages asked for under it: fresh memory of its own,
    the same bits; not where autograd records the call, nor when turned off."""
    monkeypatch.delenv("EINC_HUGE_PAGES", raising=False)
    calls = _advised(monkeypatch)
    gen = torch.Generator().manual_seed(7)
    a, b = torch.randn(2048, 24, generator=gen), torch.randn(24, 4096, generator=gen)     # 32 MiB result
    got = einc.einsum("ij,jk->ik", a, b)
    assert len(_within(calls, got)) == 1
    assert torch.equal(got, a @ b) and got.is_contiguous()
    chain = [torch.randn(s, generator=gen) for s in ((2048, 16), (16, 16), (16, 4096))]
    calls.clear()
    last = einc.einsum("ab,bc,cd->ad", *chain, optimize=False)      # its last product: 32 MiB
    assert _within(calls[-1:], last)
    torch.testing.assert_close(last, (chain[0] @ chain[1]) @ chain[2], rtol=1e-5, atol=1e-5)
    count = len(calls)
    small = einc.einsum("ij,jk->ik", a[:1024], b)           # 16 MiB: the op's own memory
    assert len(calls) == count and torch.equal(small, a[:1024] @ b)
    a.requires_grad_(True)
    recorded = einc.einsum("ij,jk->ik", a, b)               # out= is not differentiable: torch's op
    assert len(calls) == count and recorded.grad_fn is not None
    recorded.sum().backward()
    torch.testing.assert_close(a.grad, b.double().sum(1).expand(2048, 24).float(), rtol=1e-5, atol=1e-4)
    monkeypatch.setenv("EINC_HUGE_PAGES", "off")
    with torch.no_grad():
        plain = einc.einsum("ij,jk->ik", a, b)
    assert len(calls) == count and torch.equal(plain, got)
