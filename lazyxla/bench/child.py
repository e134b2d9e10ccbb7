"""Entry point of one benchmark cell, run as a script by file path:

    python lazyxla/bench/child.py --cell JSON --settings JSON --out FILE

It loads this directory as the package `lazyxla_bench` instead of
`lazyxla.bench`, so that importing it does not import lazyxla (and with it JAX)
into the eager and PyTorch/XLA children; only the lazyxla system imports lazyxla.
"""
import importlib.util
import os
import sys


def _load_package():
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or ".") == here:
        sys.path.pop(0)   # never import this folder's modules as top-level modules
    spec = importlib.util.spec_from_file_location("lazyxla_bench", os.path.join(here, "__init__.py"),
                                                  submodule_search_locations=[here])
    pkg = importlib.util.module_from_spec(spec)
    sys.modules["lazyxla_bench"] = pkg
    spec.loader.exec_module(pkg)
    return pkg


if __name__ == "__main__":
    _load_package()
    from lazyxla_bench import worker  # noqa: E402
    sys.exit(worker.main())
