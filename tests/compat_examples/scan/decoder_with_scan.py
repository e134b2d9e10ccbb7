# Copied unmodified (below these comment lines) from github.com/pytorch/xla, examples/scan/decoder_with_scan.py,
# commit 41398bfff334fc8d3b1c00be6ea8cc5411f6d6bf. BSD-3-Clause license, Copyright (c) 2018 Google Inc.;
# the license text is tests/compat_examples/LICENSE. Run by tests/test_compat_examples.py.
from typing_extensions import override
from decoder_only_model import DecoderOnlyConfig, DecoderOnlyModel


class DecoderWithScan(DecoderOnlyModel):

  def __init__(self, config: DecoderOnlyConfig):
    super().__init__(config)
    self.config = config

  @override
  def run_decoder_layers(self, hidden_states):
    from torch_xla.experimental.scan_layers import scan_layers
    return scan_layers(
        self.layers,
        hidden_states,
        is_layer_pure=self.config.is_decoder_layer_pure)
