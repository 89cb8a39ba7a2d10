"""bench/sliced.py's two memory measures: heap in use sampled after every torch op, and the
growth of the process's peak resident set size (the measure issue 12 names on the CPU)."""

import sys

import pytest
import torch

from bench import sliced


def _touch(n):
    def fn():
        x = torch.ones(n)           # written: every page resident
        del x
    return fn


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_peak_rss_growth_sees_a_temporary_and_not_what_was_freed_before():
    big = sliced.peak_rss_bytes(_touch(4 << 20))               # a 16 MiB temporary, freed inside the call
    if big is None:
        pytest.skip("this system lets no process reset its peak RSS (/proc/self/clear_refs) or has no glibc")
    assert 15 * 2**20 <= big < 24 * 2**20
    _touch(4 << 20)()                                            # freed before the measure: not counted
    assert sliced.peak_rss_bytes(lambda: None) < 2**20


def test_peak_heap_growth_sees_what_torch_ops_hold():
    held = []
    peak = sliced.peak_heap_bytes(lambda: held.append(torch.ones(1 << 20)))   # 4 MiB kept from each call
    assert peak is not None and 4 * 2**20 <= peak < 6 * 2**20
