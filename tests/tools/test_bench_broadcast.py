"""bench/broadcast.py: the suite's broadcast family timed against torch.einsum, forward and
forward + backward, each workload's answer and gradients checked first."""

import torch

from bench import broadcast
from einc.tools.benchmark.suite import find_suite, load


def test_the_family_holds_every_orientation_and_ntn():
    ws = broadcast.workloads(load(find_suite()))
    assert 4 <= len(ws) <= 6 and broadcast.NTN in {w["id"] for w in ws}
    sides = set()
    for w in ws:
        a, b = w["variants"]["cpu"]["shapes"]
        ins = w["equation"].split("->")[0].split(",")
        sa, sb = dict(zip(ins[0], a)), dict(zip(ins[1], b))
        sides |= {"left" for x in sa if sa[x] == 1 and sb.get(x, 1) > 1}
        sides |= {"right" for x in sb if sb[x] == 1 and sa.get(x, 1) > 1}
    assert sides == {"left", "right"}


def test_a_quick_run_checks_and_times_ntn(capsys):
    threads = torch.get_num_threads()
    try:
        assert broadcast.main(["--filter", "ntn", "--rounds", "1", "--budget", "0.01"]) == 0
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith(f"| {broadcast.NTN} |"))
    assert row.endswith("| ok |") and "`bcda,bca->bcd`" in row
    assert f"- {broadcast.NTN}: einc/torch.einsum forward" in out
