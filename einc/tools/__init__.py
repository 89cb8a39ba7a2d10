"""The tools: the ``einc`` command (:mod:`.cli`), the golden-kernel dump (:mod:`.dump`) and the
benchmark harness (:mod:`.benchmark`)."""
