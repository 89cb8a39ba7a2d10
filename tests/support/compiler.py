"""Triton's real compiler run from a test: only where this Triton has NVIDIA's backend, and
in a subprocess whose environment leaves out ``TRITON_INTERPRET`` (which conftest.py sets)."""

import os

import pytest


def has_nvidia_backend() -> bool:
    try:
        from triton.backends import backends
        return "nvidia" in backends
    except Exception:
        return False


needs_nvidia = pytest.mark.skipif(not has_nvidia_backend(), reason="this Triton has no NVIDIA backend")


def uninterpreted_env(**extra: str) -> dict[str, str]:
    """This process's environment without ``TRITON_INTERPRET``, with ``extra`` set."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(extra)
    return env
