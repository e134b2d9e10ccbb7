"""Test harness, not an upstream file: stands in for the examples' `train_decoder_only_base`
when this folder is first on PYTHONPATH (the eager examples take no arguments and
append the examples folder to sys.path, so this module is found first).

It loads the real ../train_decoder_only_base.py unchanged and sets its trainer's
defaults to a small model (hidden 64, intermediate 128, 4 heads, 2 kv heads, 2 layers)
and `COMPAT_EXAMPLE_STEPS` steps (default 2), and seeds torch with 42 as the base
script's own `__main__` does, so the eager examples start from the weights of
`reference.py`'s eager CPU run.
"""
import importlib.util
import os

import torch

_REAL = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "train_decoder_only_base.py")
_spec = importlib.util.spec_from_file_location("upstream_train_decoder_only_base", _REAL)
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)

from decoder_only_model import DecoderOnlyModel  # noqa: E402  (the examples folder, on sys.path by now)
from reference import SMALL  # noqa: E402

TrainDecoderOnlyBase = _module.TrainDecoderOnlyBase
TrainDecoderOnlyBase.__init__.__defaults__ = (DecoderOnlyModel, int(os.environ.get("COMPAT_EXAMPLE_STEPS", "2")), SMALL)
torch.manual_seed(42)
