"""The scripts under ``bench/`` import as a package and offer what their tests use (run
by ``tests/tools/test_cli.py``)."""

import checkout  # noqa: F401  (puts this checkout first on sys.path)

from bench import dispatch, run  # noqa: E402

assert run.check and run.methods and run.METHODS and dispatch.chain(3) == "ab,bc,cd->ad"
