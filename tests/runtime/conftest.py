"""Fixtures of the runtime tests."""

import pytest

import einc
from einc.runtime.torch_executor import chunked, summed


@pytest.fixture
def chunks_always(monkeypatch):
    """Every permuted last product and every multiply-and-sum cut, in chunks of 64 bytes
    per thread (runtime/torch_executor/chunked.py), einc's caches emptied before and after."""
    monkeypatch.setattr(chunked, "MIN_BYTES", 0)
    monkeypatch.setattr(summed, "HALF_MIN_BYTES", 0)
    monkeypatch.setattr(chunked, "CHUNK_BYTES", 64)
    einc.cache_clear()
    yield
    einc.cache_clear()
