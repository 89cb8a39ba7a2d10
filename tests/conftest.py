import os
import sys

# Triton reads TRITON_INTERPRET when it is imported: set it before anything imports it,
# so that generated kernels run on CPU tensors (tests/test_triton*.py).
os.environ.setdefault("TRITON_INTERPRET", "1")

sys.path.insert(0, os.path.dirname(__file__))
