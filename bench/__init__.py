"""einc benchmarks: ``python bench/run.py`` (suite) and ``python bench/dispatch.py`` (per-call overhead)."""
