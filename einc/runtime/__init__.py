"""Runtime: the cache, the torch executor and (later) loaded kernels. Imports torch."""
