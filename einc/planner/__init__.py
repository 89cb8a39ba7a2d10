"""The planner: equation -> graph -> plan (opt_einsum's order, slicing, fusion decisions).

Pure Python: nothing here imports torch or triton (``tests/test_layering.py``).
"""
