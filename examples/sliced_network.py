"""A random quantum circuit's amplitude <0...0|C|0...0>, sliced to a memory limit and run on
one process and on 2 torch.distributed ranks (gloo, localhost).

The circuit: qubits on a grid, layers of random two-qubit unitaries cycling over four
coupling patterns; as a tensor network, one tensor per gate and per boundary state.
einc plans it with its default search (which finds the same path for this network on
every run) and slices it so that the intermediates alive together never exceed
``LIMIT`` elements.  Each run prints its time and
its peak memory: the growth of the process's peak resident set size during the
contraction (the peak is reset first where Linux allows it), against the target
``1.5 x (limit + operands + result)`` bytes.

    python examples/sliced_network.py [rows cols depth]
"""

from __future__ import annotations

import datetime
import os
import resource
import socket
import sys
import tempfile
import time
import traceback

import torch
import torch.multiprocessing as mp

import einc
import einc.distributed
import einc.planner.equation

LIMIT = 2 ** 16         # elements
ROWS, COLS, DEPTH = 4, 6, 12


def circuit(rows: int, cols: int, depth: int, seed: int = 0):
    """``(operands, sublists)`` of the amplitude network: complex64 tensors and their index
    ids, numbered in order of first appearance."""
    g = torch.Generator().manual_seed(seed)
    n = rows * cols
    next_id = iter(range(10 ** 9))
    wire = [next(next_id) for _ in range(n)]
    zero = torch.tensor([1, 0], dtype=torch.complex64)
    ops, subs = [zero] * n, [[w] for w in wire]
    for layer in range(depth):
        kind = layer % 4
        for r in range(rows):
            for c in range(cols):
                q = r * cols + c
                other = {0: q + 1 if c % 2 == 0 and c + 1 < cols else None,
                         1: q + 1 if c % 2 == 1 and c + 1 < cols else None,
                         2: q + cols if r % 2 == 0 and r + 1 < rows else None,
                         3: q + cols if r % 2 == 1 and r + 1 < rows else None}[kind]
                if other is None:
                    continue
                u, _ = torch.linalg.qr(torch.randn(4, 4, generator=g, dtype=torch.complex128))
                a, b = next(next_id), next(next_id)
                ops.append(u.reshape(2, 2, 2, 2).to(torch.complex64))
                subs.append([a, b, wire[q], wire[other]])
                wire[q], wire[other] = a, b
    ops += [zero] * n
    subs += [[w] for w in wire]
    return ops, subs


def grid(rows: int = 4, cols: int = 5, bond: int = 4, seed: int = 0, dtype=torch.float64):
    """``(equation, operands)`` of a closed 2D grid tensor network: one tensor per site,
    one index of size ``bond`` per nearest-neighbour pair (so a site holds at most
    ``bond ** 4`` elements), the result a scalar.  The 4x5 grid of bond 4 in float64 is
    the grid of bench/measured/sliced.md: 141k flops unsliced, operands of at most 256 elements."""
    g = torch.Generator().manual_seed(seed)
    letters = iter(einc.planner.equation.letter(i) for i in range(10 ** 6))
    bonds = {}
    terms = []
    for r in range(rows):
        for c in range(cols):
            term = ""
            for rr, cc in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1)):
                if 0 <= rr < rows and 0 <= cc < cols:
                    key = tuple(sorted(((r, c), (rr, cc))))
                    if key not in bonds:
                        bonds[key] = next(letters)
                    term += bonds[key]
            terms.append(term)
    ops = [torch.randn([bond] * len(t), generator=g, dtype=torch.float64).to(dtype) for t in terms]
    return ",".join(terms) + "->", ops


def interleaved(ops, subs):
    """einsum's sublist form: ``op0, sub0, op1, sub1, ..., []`` (the amplitude is a scalar)."""
    return [x for pair in zip(ops, subs) for x in pair] + [[]]


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")            # resets VmHWM, the peak resident set size
        return True
    except OSError:
        return False


def measured(fn):
    """``(result, seconds of the second call, peak growth in bytes over both calls)`` of
    ``fn()``; torch's complex matrix products are warmed up first, on other operands."""
    torch.einsum("ij,jk->ik", torch.ones(64, 64, dtype=torch.complex64), torch.ones(64, 64, dtype=torch.complex64))
    reset = _reset_peak()
    before = _rss_kib("VmRSS") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    fn()                            # the first call also builds the (cached) plans
    t = time.perf_counter()
    out = fn()
    seconds = time.perf_counter() - t
    peak = _rss_kib("VmHWM") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return out, seconds, max(0, peak - before) * 1024


def _single(args, queue):
    torch.set_num_threads(1)
    ops, subs = circuit(*args)
    out, seconds, peak = measured(lambda: einc.einsum(*interleaved(ops, subs), memory_limit=LIMIT))
    info = einc.contract_path(*interleaved(ops, subs), memory_limit=LIMIT)[1]
    s = info.slicing
    queue.put(("single", complex(out), seconds, peak, {"num_slices": s.num_slices if s else 1}))
    # The control: the same path, not sliced, in the same process.
    out, seconds, peak = measured(lambda: einc.einsum(*interleaved(ops, subs), optimize=info.path))
    queue.put(("unsliced", complex(out), seconds, peak,
               {"num_slices": 1, "largest": s.unsliced_largest if s else info.largest_intermediate}))


def _rank(rank, world, port, args, queue):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import torch.distributed as dist
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=120))
    torch.set_num_threads(1)
    code = 1
    try:
        ops, subs = circuit(*args)
        timings = {}
        out, seconds, peak = measured(lambda: einc.distributed.einsum(*interleaved(ops, subs), memory_limit=LIMIT,
                                                                      timings=timings))
        queue.put((f"rank {rank}", complex(out), seconds, peak, timings))
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        dist.destroy_process_group()
        # The report is sent (the queue's feeder thread flushed); leave without the
        # interpreter's teardown, where gloo's threads now and then abort the process
        # ("terminate called without an active exception") -- torch's, not einc's; as
        # tests/doors/test_distributed.py's workers do.
        queue.close()
        queue.join_thread()
        os._exit(code)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(args):
    ops, subs = circuit(*args)
    info = einc.contract_path(*interleaved(ops, subs), memory_limit=LIMIT)[1]
    print(f"circuit {args[0]}x{args[1]} qubits, depth {args[2]}: {len(ops)} tensors")
    text = str(info).splitlines()
    print("\n".join(text[1:text.index(next(line for line in text if line.startswith("---")))]))
    s = info.slicing
    itemsize = torch.tensor([], dtype=torch.complex64).element_size()
    bound = (LIMIT + sum(o.numel() for o in ops) + 1) * itemsize
    if s is not None:
        print(f"sliced: {s.num_slices} slices over {len(s.indices)} indices, flops overhead {s.overhead:.3g}x")
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    p = ctx.Process(target=_single, args=(args, queue))
    p.start()
    p.join()
    if p.exitcode:
        raise SystemExit(f"the single-process run failed (exit code {p.exitcode})")
    results = [queue.get(timeout=60)]
    control = queue.get(timeout=60)
    mp.start_processes(_rank, args=(2, _free_port(), args, queue), nprocs=2, join=True, start_method="spawn")
    results += sorted([queue.get(timeout=60), queue.get(timeout=60)])
    print(f"memory target: peak growth <= 1.5 x (limit + operands + result) = {1.5 * bound / 2 ** 20:.2f} MiB")
    amplitude = results[0][1]
    for name, value, seconds, peak, timings in results:
        extra = f", {timings['num_slices']} slices"
        if "slices" in timings:
            a, b = timings["slices"]
            extra = f", slices {a}..{b - 1} of {timings['num_slices']} in {timings['seconds'] * 1e3:.1f} ms"
        print(f"{name:>8}: amplitude {value.real:+.6e}{value.imag:+.6e}j, {seconds * 1e3:.1f} ms, "
              f"peak growth {peak / 2 ** 20:.2f} MiB ({peak / bound:.2f}x the bound){extra}")
    name, value, seconds, peak, timings = control
    print(f"unsliced: amplitude {value.real:+.6e}{value.imag:+.6e}j, {seconds * 1e3:.1f} ms, peak growth "
          f"{peak / 2 ** 20:.2f} MiB (the same path, largest intermediate {timings['largest']:.4g} elements = "
          f"{timings['largest'] * itemsize / 2 ** 20:.2f} MiB)")
    ranks = results[1:]
    times = [r[4]["seconds"] for r in ranks]
    agree = all(abs(r[1] - amplitude) <= 1e-5 * max(1.0, abs(amplitude)) for r in ranks)
    print(f"2 ranks agree with one process: {agree}")
    print(f"rank slice times: {' / '.join(f'{t * 1e3:.1f} ms' for t in times)} "
          f"(slower / faster = {max(times) / max(min(times), 1e-9):.2f}; target <= 1.2)")
    print(f"|amplitude|^2 = {abs(amplitude) ** 2:.4e} (a random circuit: about 2^-{args[0] * args[1]} = "
          f"{2.0 ** -(args[0] * args[1]):.4e} on average)")


if __name__ == "__main__":
    given = [int(a) for a in sys.argv[1:4]]
    with tempfile.TemporaryDirectory(prefix="einc-example-") as cache:    # removed once the ranks are done
        os.environ.setdefault("EINC_CACHE_DIR", cache)
        main(tuple(given) if len(given) == 3 else (ROWS, COLS, DEPTH))
