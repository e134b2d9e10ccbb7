"""The captured step's pass (sync/fingerprint.py): a buffer's part of the fingerprint says
what the donor plan decides it by, so a buffer that another live tensor starts holding, or
whose flags change, makes another fingerprint (the captured step falls back and records
again), and the same state makes the same one."""
import torch

import lazyxla as lx
from lazyxla.frontend.storage import Storage, live_storages
from lazyxla.ir.build import data_node
from lazyxla.sync import fingerprint


def _print(roots: list, device: int) -> tuple:
    leaves: list = []
    scalars: list = []
    return fingerprint.walk(["header"], [], roots, {}, fingerprint.holders(live_storages(device), []), 8,
                            leaves, scalars)


def test_a_buffer_held_elsewhere_or_flagged_makes_another_fingerprint():
    a = torch.ones(4).to(lx.device())
    lx.sync()
    device = a._st.device
    node = a._st.value
    data = node.data
    first = _print([node], device)
    assert first == _print([node], device)   # the same state, the same fingerprint
    assert first[1][1:] == (-2, False, False, False, True)   # its owner holds it, no one else, no flags
    other = Storage(data_node(data), device)   # another live tensor's storage holding the buffer
    held = _print([node], device)
    assert held != first and held[1][2] is True
    del other
    assert _print([node], device) == first
    lx.set_buffer_donation(a, True)
    assert _print([node], device) != first
    lx.set_buffer_donation(a, False)
    assert _print([node], device) == first


def test_operands_met_again_are_references_not_new_parts():
    a = torch.ones(4).to(lx.device())
    lx.sync()
    node = a._st.value
    again = data_node(node.data)   # a second node of the same buffer
    parts = _print([node, node, again], a._st.device)
    assert parts[2] == parts[3] == -1 and parts[4] == ("again", 0) and parts[5] == -1
