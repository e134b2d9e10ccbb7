"""PyTorch/XLA's own test files, run through `python -m lazyxla.compat` by
tests/test_compat_test_operations.py: pytest must not collect them itself (they import
torch_xla, which exists only under the compatibility layer)."""
collect_ignore = ["test_operations.py", "test_utils.py"]
