"""The launcher's import path before the runtime had wings, kept for kernel modules dumped
then (they import ``Launcher`` from here): :mod:`einc.runtime.triton_executor.launch`."""
from .triton_executor.launch import *  # noqa: F401,F403
