"""An import path of the launcher, :mod:`einc.runtime.triton_executor.launch`, for kernel
modules dumped by older einc versions, which import ``Launcher`` from here."""
from .triton_executor.launch import *  # noqa: F401,F403
