"""bench/row_ops.py: one workload's aten ops on both sides, their times inside the call,
the whole calls and the call's own cost on tiny operands."""

import torch

from bench import row_ops


def test_a_quick_run_lists_both_sides_ops_and_times_them(capsys):
    threads = torch.get_num_threads()
    try:
        assert row_ops.main(["bcast_summed_left", "--rounds", "3"]) == 0
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    torch_part, einc_part = out.split("\neinc.einsum:\n")
    # torch sums a permuted view with keepdim; einc sums the operand as it is: both multiply after
    assert "aten.sum.dim_IntList((64, 1, 96, 32):(3072, 1, 1, 96), [3], True)" in torch_part
    assert "aten.sum.dim_IntList((64, 32, 96):(3072, 96, 1), [1])" in einc_part
    assert all("aten.mul.Tensor(" in part and "1. sum " in part and "2. mul " in part
               for part in (torch_part, einc_part))
    for row in ("| torch.einsum + .contiguous() | ", "| einc.einsum | ", "| einc's entry | "):
        assert out.count(row) == 2       # the whole calls and the tiny ones
    assert "| torch.einsum + .contiguous() | " in out and "1.000 [1.000-1.000]" in out
