"""Benchmark harness behind ``einc bench`` and ``bench/``: the workload suite
(:mod:`.suite`, standard library only), timing (:mod:`.timing`, standard library
only), the suite runner (:mod:`.runner`), the dispatch micro-benchmark
(:mod:`.dispatch`), reports (:mod:`.report`), the chart (:mod:`.chart`, needs
matplotlib) and a measured GPU roofline (:mod:`.roofline`).

Nothing is imported here, so ``einc.tools.benchmark.suite`` loads without torch.
"""
