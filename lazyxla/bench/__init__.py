"""lazyxla's benchmark suite: `python -m lazyxla.bench` (see docs/benchmarks.md).

Every cell (workload x system) runs in its own subprocess so that peak RSS and
compile caches are its own. The child side (`child.py` and the modules it
imports) is loaded as the stand-alone package `lazyxla_bench`, so that the
eager, JAX-limit and PyTorch/XLA children never import lazyxla itself (which
would change their memory footprint and, for JAX, enable 64-bit mode), and so
that a foreign interpreter with its own torch (PyTorch/XLA) can run it.
Keep this file free of imports.
"""
