"""A measured roofline for a CUDA device: peak matrix-product rate per dtype, peak copy bandwidth.

Datasheet peaks depend on the board, clocks and power limits; this measures what torch
reaches on the device at hand: ``torch.mm`` of two square matrices for each dtype the
suite uses (flops counted as the suite counts them: a multiply-add is 2, for complex
dtypes too), and ``copy_`` of a 1 GiB buffer for the bandwidth (read + write).  A
workload's bound is ``min(peak[dtype], intensity * bandwidth)`` with intensity =
``flops / min_bytes`` from the suite.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .timing import time_batch

_MM_SIZE = {"float64": 4096, "complex128": 4096, "complex64": 4096}   # others: 8192


def _best(fn, reps: int = 5) -> float:
    fn()
    return min(time_batch(fn, 1, torch.cuda.synchronize) for _ in range(reps))


def measure_bandwidth(nbytes: int = 2**30) -> float:
    """Bytes per second of a device-to-device copy (counting the read and the write)."""
    x = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    seconds = _best(lambda: y.copy_(x))
    x = y = None  # not `del`: ruff reads a later del as undefining the lambdas' names
    return 2 * nbytes / seconds


def measure_peak(dtype: str) -> float:
    """Flops per second of ``torch.mm`` on square ``dtype`` matrices."""
    n = _MM_SIZE.get(dtype, 8192)
    a = torch.randn(n, n, dtype=getattr(torch, dtype), device="cuda")
    b = torch.randn(n, n, dtype=getattr(torch, dtype), device="cuda")
    seconds = _best(lambda: torch.mm(a, b))
    a = b = None  # not `del`: ruff reads a later del as undefining the lambdas' names
    return 2 * n**3 / seconds


@dataclass
class Roofline:
    bandwidth: float                                  # bytes/s
    peaks: dict[str, float] = field(default_factory=dict)   # dtype -> flops/s

    def bound(self, variant: dict):
        """The attainable flops/s for a suite variant, or None without flops/bytes/peak."""
        flops, nbytes, peak = variant.get("flops"), variant.get("min_bytes"), self.peaks.get(variant["dtype"])
        if not flops or not nbytes or not peak:
            return None
        return min(peak, flops / nbytes * self.bandwidth)

    def describe(self) -> str:
        peaks = ", ".join(f"{d} {p / 1e12:.3g} TFLOP/s" for d, p in sorted(self.peaks.items()))
        return (f"roofline (measured on this device): copy bandwidth {self.bandwidth / 1e9:.0f} GB/s; "
                f"torch.mm peak {peaks} (TF32 {'on' if torch.backends.cuda.matmul.allow_tf32 else 'off'})")


def measure(dtypes) -> Roofline:
    """The roofline for these dtypes on the current CUDA device."""
    roof = Roofline(measure_bandwidth())
    for d in sorted(set(dtypes)):
        try:
            roof.peaks[d] = measure_peak(d)
        except RuntimeError:        # a dtype without a matrix product on this device
            pass
    torch.cuda.empty_cache()
    return roof
