"""`torch_xla._XLAC`: the donation bindings that scripts and upstream's donation tests
call (docs/compat.md, "torch_xla._XLAC"), each a call of lazyxla's public API.

Device arguments: upstream parses and then ignores the `device` of the aliasing
config (the config is process-global); so does this layer. `devices` lists of
the sync bindings name replication devices, which lazyxla has no use for.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import torch

import lazyxla as lx

from ..unsupported import refuse, unsupported_names


def _check_device(device: str) -> None:
    if device:
        torch.device(device)   # an invalid string raises, as upstream's GetDeviceOrCurrent


# -- donation (SPEC §1.2) -----------------------------------------------------------

def _set_buffer_donation(tensor: torch.Tensor, should_donate: bool) -> bool:
    """lx.set_buffer_donation: True iff `tensor` holds device data and the flag was set.
    lazyxla also returns False for a buffer another live tensor holds (e.g. an
    unmaterialised clone), where upstream marks it and later donates the clone's data."""
    return lx.set_buffer_donation(tensor, should_donate)


def _get_buffer_donation(tensor: torch.Tensor) -> bool:
    return lx.get_buffer_donation(tensor)


def _xla_set_enable_alias_with_buffer_donor_config(enable_user_config_alias: bool = False,
                                                   device: str = "") -> None:
    """lx.set_explicit_donation for all devices (upstream's config is global)."""
    _check_device(device)
    lx.set_explicit_donation(bool(enable_user_config_alias))


def _xla_get_enable_alias_with_buffer_donor_config(device: str = "") -> bool:
    _check_device(device)
    return lx.explicit_donation_enabled()


def _is_placecholder(tensor: torch.Tensor) -> bool:   # (sic) upstream's spelling
    """True iff the tensor's buffer is gone: lazyxla's device data is never an unfilled
    placeholder to Python (results are JAX arrays as soon as a graph is dispatched), so
    the upstream cases left are donated buffers: lx.is_donated."""
    return lx.is_donated(tensor)


def _get_xla_tensor_debug_info(tensor: torch.Tensor) -> str:
    """Upstream's multi-line dump with lazyxla's fields (lx.debug.tensor_info and the
    tensor's IR node, lx.debug.ir_nodes): `XLA Shape: f32[5]` (the device shape),
    `IR: <op>, xla_shape=...` for pending computation or `IR: None`, `XLAData: None`
    or the buffer's `Data Shape`, and upstream's `Data Handle: <id>|None|Deleted`
    line. A tensor that is not lazyxla's: `Not a XLATensor`, as upstream."""
    if not _is_lazyxla(tensor):
        return "Not a XLATensor\n"
    info = lx.debug.tensor_info(tensor)
    handle = {"donated": "Deleted", "failed": "Deleted", "pending": "None"}.get(info["base_state"],
                                                                           str(info.get("buffer_id")))
    device = _device_name(tensor.device.index or 0)
    if info["base_state"] in ("donated", "failed"):   # no IR left to show: no buffer (lx.FailedOpError)
        shape = _xla_shape(info["shape"], info["dtype"])
        ir, data = "None", "XLAData: None"
    else:
        node = lx.debug.ir_nodes([tensor])[-1]
        shape = _xla_shape(node.shape, node.device_dtype)
        holds_data = node.op == "lazyxla::data" and info["base_state"] == "device data"
        ir = "None" if holds_data else f"{_ir_op(node)}, xla_shape={shape}"
        data = f"XLAData: \n  Data Device: {device}\n  Data Shape: {shape}" if holds_data else "XLAData: None"
    lines = ["XLATensor {", f"TensorID: {info['tensor_id']}", f"Device: {device}",
             f"XLA Shape: {shape}", f"IR: {ir}", data, f"State: {info['state']}",
             f"ShouldDonate: {info['donate']}", f"Data Handle: {handle}", "}"]
    return "\n".join(lines) + "\n"


def _is_lazyxla(tensor: object) -> bool:
    return isinstance(tensor, lx.LazyTensor)


def _device_name(index: int) -> str:
    from .runtime import device_type
    return f"{device_type()}:{index}"


def _get_xla_tensor_shape_type(tensor: torch.Tensor) -> str:
    """The element type of the tensor's device shape ("f16", "bf16", "s64"): its
    storage dtype (lx.set_storage_dtypes) as XLA names it."""
    node = lx.debug.ir_nodes([tensor])[-1]
    return _SHORT_TYPES.get(node.device_dtype, str(node.device_dtype))


def _get_xla_tensor_dimension_size(tensor: torch.Tensor, dim: int) -> torch.Tensor:
    """The size of `dim` as an int32 device scalar. Upstream's bounded dynamic shapes
    make it a graph value; lazyxla's data-dependent shapes (nonzero, masked_select) are
    read on the host when the op runs, so the size is known here."""
    return torch.tensor(tensor.shape[dim], dtype=torch.int32, device=tensor.device)


# -- sync (SPEC §1.1) ---------------------------------------------------------------

def _xla_sync_multi(tensors: Sequence[torch.Tensor], devices: List[str], wait: bool = True,
                    sync_xla_data: bool = True) -> None:
    """lx.sync_tensors(tensors, wait=wait, donate_inplace=sync_xla_data). With
    sync_xla_data=True lazyxla donates only buffers nothing else needs; upstream's
    partial set may donate a buffer another pending tensor reads (SPEC §3.6)."""
    lx.sync_tensors(list(tensors), wait=wait, donate_inplace=sync_xla_data)


def _xla_step_marker(device: str = "", devices: Sequence[str] = (), wait: bool = True,
                     reset_scope: bool = True) -> None:
    _check_device(device)
    lx.sync(wait=wait)


def _xla_wait_device_ops(devices: Sequence[str] = ()) -> None:
    lx.wait_device_ops()


def _xla_get_default_device() -> str:
    """Upstream's name of the default device, "xla:0"."""
    from . import device
    return str(device())


# -- processes and preemption (torch_xla.experimental.distributed_checkpoint) ----------

def _ensure_xla_coordinator_initialized(global_rank: int, world_size: int, master_addr: str,
                                        master_port: Optional[int] = None) -> None:
    """Upstream starts its coordination service here; lazyxla's is JAX's, started by
    lx.distributed.initialize. One process needs none; more must match it."""
    if world_size != lx.distributed.process_count() or global_rank != lx.distributed.process_index():
        raise ValueError(f"_ensure_xla_coordinator_initialized(global_rank={global_rank}, world_size={world_size}): "
                         f"lazyxla runs process {lx.distributed.process_index()} of "
                         f"{lx.distributed.process_count()}; start processes with lx.distributed.initialize")


def _activate_preemption_sync_manager() -> None:
    from . import _preemption
    _preemption.activate()


def _deactivate_preemption_sync_manager() -> None:
    from . import _preemption
    _preemption.deactivate()


def _sync_point_reached(step: int) -> bool:
    """True once this process got a SIGTERM after activation (_preemption.py)."""
    from . import _preemption
    return _preemption.sync_point_reached(step)


# -- metrics ---------------------------------------------------------------------------

def _xla_increment_counter(name: str, value: int = 1) -> None:
    """Adds to the counter as `torch_xla.debug.metrics` reads it (lx.metrics keeps its own)."""
    from .debug.metrics import add_upstream_count
    add_upstream_count(name, value)


def _xla_metrics_report() -> str:
    """The text of `torch_xla.debug.metrics.metrics_report()` (upstream's binding behind it)."""
    from .debug.metrics import metrics_report
    return metrics_report()


# -- runtime --------------------------------------------------------------------------

_BACKEND_REGISTERED: List[bool] = []


def _init_xla_lazy_backend() -> None:
    """lazyxla registers its device and kernels once, on `import lazyxla`; as upstream,
    the counter `RegisterXLAFunctions` reads 1 however often this is called."""
    lx.device()
    if not _BACKEND_REGISTERED:
        _BACKEND_REGISTERED.append(True)
        _xla_increment_counter("RegisterXLAFunctions")


def _xla_real_devices(devices: Optional[Sequence[str]] = None) -> List[str]:
    """The runtime names ("CPU:0") of `devices` (default: all), as xm.xla_real_devices."""
    from .core.xla_model import xla_real_devices
    return xla_real_devices(list(devices) if devices is not None else None)


def _xla_tensors_from_aten(tensors: Sequence[torch.Tensor], devices: Sequence[str]) -> List[torch.Tensor]:
    """Copies of `tensors` on `devices` (one device name per tensor)."""
    from ._device_names import to_lazyxla
    if len(tensors) != len(devices):
        raise ValueError(f"_xla_tensors_from_aten: {len(tensors)} tensors but {len(devices)} devices")
    return [t.to(to_lazyxla(d)) for t, d in zip(tensors, devices)]


def _get_git_revs() -> dict:
    """Versions in place of upstream's git revisions: `xla` is lazyxla's, `torch`
    torch's git revision (its version where the build has none), `jax` JAX's."""
    import jax
    from .. import distribution
    return {"xla": distribution.VERSION, "torch": torch.version.git_version or torch.__version__,
            "jax": jax.__version__}


def _unsafe_buffer_pointer(tensor: torch.Tensor) -> int:
    """The address of the device buffer behind `tensor` (pending work runs first):
    `lx.to_jax(tensor).unsafe_buffer_pointer()`. lazyxla builds without `lx.to_jax`
    (JAX interop) refuse, naming the binding."""
    to_jax = getattr(lx, "to_jax", None)
    if to_jax is None:
        refuse("torch_xla._XLAC._unsafe_buffer_pointer", "It needs lx.to_jax, which this lazyxla lacks")
    return to_jax(tensor).unsafe_buffer_pointer()


def _get_executed_fallback_ops() -> List[str]:
    """`torch_xla.debug.metrics.executed_fallback_ops()`."""
    from .debug.metrics import executed_fallback_ops
    return executed_fallback_ops()


# -- precision -------------------------------------------------------------------------

def _xla_set_mat_mul_precision(precision: str) -> None:
    """`torch_xla.backends.set_mat_mul_precision`'s binding: lx.set_matmul_precision."""
    lx.set_matmul_precision(precision)


def _xla_get_mat_mul_precision() -> str:
    return lx.matmul_precision()


# -- ops -------------------------------------------------------------------------------

def _xla_dot_general(lhs: torch.Tensor, rhs: torch.Tensor, dim_vectors,
                     preferred_element_type: Optional[torch.dtype] = None) -> torch.Tensor:
    """XLA's DotGeneral as a torch op on lazyxla tensors (`torch.einsum`, which lazyxla
    lowers to one dot_general): `dim_vectors = ((lhs_contract, rhs_contract),
    (lhs_batch, rhs_batch))`, an empty tuple for none; the result's dimensions are the batch dimensions, then
    lhs's free ones, then rhs's. With `preferred_element_type` the operands are cast to
    it first (XLA accumulates in that type)."""
    contracting, batching = (tuple(dim_vectors) + ((), ()))[:2]
    lhs_contract, rhs_contract = tuple(contracting) or ((), ())
    lhs_batch, rhs_batch = tuple(batching) or ((), ())
    if len(lhs_contract) != len(rhs_contract) or len(lhs_batch) != len(rhs_batch):
        raise ValueError(f"_xla_dot_general: contracting {list(lhs_contract)}/{list(rhs_contract)} and batch "
                         f"{list(lhs_batch)}/{list(rhs_batch)} dimensions must pair up")
    letters = iter("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    lhs_sub = [next(letters) for _ in range(lhs.dim())]
    rhs_sub = [next(letters) for _ in range(rhs.dim())]
    for l, r in zip([*lhs_contract, *lhs_batch], [*rhs_contract, *rhs_batch]):
        rhs_sub[r] = lhs_sub[l]
    batch = [lhs_sub[d] for d in lhs_batch]
    lhs_free = [c for d, c in enumerate(lhs_sub) if d not in lhs_contract and d not in lhs_batch]
    rhs_free = [c for d, c in enumerate(rhs_sub) if d not in rhs_contract and d not in rhs_batch]
    if preferred_element_type is not None:
        lhs, rhs = lhs.to(preferred_element_type), rhs.to(preferred_element_type)
    equation = f"{''.join(lhs_sub)},{''.join(rhs_sub)}->{''.join(batch + lhs_free + rhs_free)}"
    return torch.einsum(equation, lhs, rhs)


# -- graph introspection (SPEC §1.4) ------------------------------------------------

def _get_graph_hash(tensors: Sequence[torch.Tensor]) -> bytes:
    """lx.graph_hash as raw bytes (upstream: 16 bytes of a 128-bit hash; lazyxla: 8 bytes)."""
    return bytes.fromhex(lx.graph_hash(list(tensors)))


def _get_xla_tensors_hlo(tensors: Sequence[torch.Tensor]) -> str:
    """HLO text of the graph computing `tensors` (lx.debug.hlo_text): lazyxla's lowering
    of it, not upstream's (instruction names and layouts differ; loops are HLO `while`s
    in both)."""
    return lx.debug.hlo_text(list(tensors))


def _get_xla_tensors_text(tensors: Sequence[torch.Tensor]) -> str:
    """Upstream's IR text of `tensors` (one line per node, from lx.debug.ir_nodes):
    `IR {`, then `%i = <device shape> <op>(%operands), xla_shape=...` with `device=` on
    device data, `value=` on scalars and `ROOT=k` on the value of `tensors[k]`, then `}`.
    Nodes come in upstream's post order (an op's last operand is emitted first), an op's
    compile-time Scalar arguments (`pow`'s static exponent) are `prim::Constant` operands
    after its tensors, as upstream's, and lifted scalars are `prim::Constant` too.
    Shapes carry the device dtype (bf16 for float32 under XLA_USE_BF16) and upstream's
    layout ({1,0}); ops are named `aten::<op>`, buffers `xla::device_data`; an output `j`
    of a multi-output node is the operand `%i.j`."""
    from .runtime import device_type
    nodes = lx.debug.ir_nodes(list(tensors))
    names: dict = {}     # node index or (index, constant name) -> "%k" / "%k.j"
    lines = ["IR {"]
    line_of: dict = {}   # node index -> its line (ROOT tags of the items it owns go there)

    def children(key) -> list:
        if not isinstance(key, int):
            return []
        node = nodes[key]
        return [*node.operands, *((key, name) for name, _ in node.constants)]

    def emit(key) -> None:
        if not isinstance(key, int):   # a compile-time Scalar argument of node key[0]
            names[key] = f"%{len(lines) - 1}"
            value = dict(nodes[key[0]].constants)[key[1]]
            shape = _xla_shape((), _scalar_dtype(value, nodes[key[0]]))
            lines.append(f"  {names[key]} = {shape} prim::Constant(), xla_shape={shape}, value={value}")
            return
        node = nodes[key]
        if node.op == "lazyxla::getitem":
            owner = node.operands[0]
            names[key] = f"{names[owner]}.{node.value}"
            for root in node.roots:
                lines[line_of[owner]] += f", ROOT={root}"
            return
        names[key] = f"%{len(lines) - 1}"
        shape = _xla_shape(node.shape, node.device_dtype)
        tags = [f"xla_shape={shape}"]
        if node.op == "lazyxla::data":
            tags.append(f"device={device_type()}:{node.device}")
        elif node.op == "lazyxla::scalar":
            tags.append(f"value={node.value}")
        tags += [f"ROOT={root}" for root in node.roots]
        operands = ", ".join(names[c] for c in children(key))
        line_of[key] = len(lines)
        lines.append(f"  {names[key]} = {shape} {_ir_op(node)}({operands}), {', '.join(tags)}")

    # torch's lazy ComputePostOrder: a stack of nodes whose operands are pushed in order,
    # so the last operand is emitted first; each root in the order of `tensors`
    roots = sorted((root, i) for i, node in enumerate(nodes) for root in node.roots)
    state: dict = {}
    for _, root in roots:
        stack = [root]
        while stack:
            key = stack[-1]
            if key not in state:
                state[key] = "emitting"
                stack.extend(c for c in children(key) if c not in state)
            else:
                stack.pop()
                if state[key] == "emitting":
                    state[key] = "emitted"
                    emit(key)
    return "\n".join(lines + ["}", ""])


def _scalar_dtype(value, node) -> torch.dtype:
    """The type upstream gives a Scalar constant: the op's floating type for a float,
    else the value's own type."""
    if isinstance(value, bool):
        return torch.bool
    if isinstance(value, int):
        return torch.int64
    if isinstance(value, complex):
        return torch.complex64
    return node.device_dtype if isinstance(node.device_dtype, torch.dtype) and node.device_dtype.is_floating_point \
        else torch.float64


def _ir_op(node) -> str:
    """Upstream's name of an IR node's op: `aten::add` for lazyxla's `aten::add.Tensor`."""
    return {"lazyxla::data": "xla::device_data", "lazyxla::scalar": "prim::Constant"}.get(
        node.op, node.op.split(".", 1)[0])


_SHORT_TYPES = {torch.float32: "f32", torch.float64: "f64", torch.bfloat16: "bf16", torch.float16: "f16",
                torch.int64: "s64", torch.int32: "s32", torch.int16: "s16", torch.int8: "s8",
                torch.uint8: "u8", torch.uint32: "u32", torch.uint64: "u64", torch.bool: "pred",
                torch.complex64: "c64", torch.complex128: "c128"}


def _xla_shape(shape, dtype) -> str:
    """XLA's text of a shape: `f32[10,5]{1,0}` (row-major layout), `f32[]`, or a tuple."""
    if isinstance(dtype, tuple):
        return "(" + ", ".join(_xla_shape(s, d) for s, d in zip(shape, dtype) if d is not None) + ")"
    layout = "{" + ",".join(map(str, reversed(range(len(shape))))) + "}" if shape else ""
    return f"{_SHORT_TYPES.get(dtype, str(dtype))}[{','.join(map(str, shape))}]{layout}"


__getattr__ = unsupported_names(__name__)
