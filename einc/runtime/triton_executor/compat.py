"""What einc does differently on the older releases of its supported range: one place.

The supported range (torch 2.10-2.15, triton 3.6-3.9: README "Supported versions",
``noxfile.py``) needs one shim, applied where a generated module is loaded under
Triton's CPU interpreter:

- Triton 3.6's interpreter turns a one-element block into a Python int (``range``
  bounds, ``__index__``) with ``int(array)`` on a 1-D array, which numpy 2.4 refuses and
  numpy 1.25-2.3 warn about (a ``DeprecationWarning`` that tests running with warnings
  as errors see as a failure).  Triton 3.7 squeezes the array first; this gives 3.6's
  interpreter that same conversion.  Compiled kernels (a GPU) never run that code.
"""

from __future__ import annotations

import inspect

_patched = False


def triton_interpreter() -> None:
    """Give Triton's interpreter the one-element conversion of Triton 3.7+ where it lacks it."""
    global _patched
    if _patched:
        return
    from triton.runtime import interpreter

    original = getattr(interpreter, "_patch_lang_tensor", None)
    try:
        old = original is not None and "int(self.handle.data)" in inspect.getsource(original)
    except (OSError, TypeError):
        old = False
    if old:
        def patch_lang_tensor(tensor, scope):
            original(tensor, scope)
            scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))
        interpreter._patch_lang_tensor = patch_lang_tensor
    _patched = True
