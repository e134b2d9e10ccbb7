"""Readable text of a collected graph (one line per node, SSA style)."""
from __future__ import annotations

from ..ir.node import DATA, GETITEM, SCALAR, Node

_SHORT = {"torch.float32": "f32", "torch.float16": "f16", "torch.bfloat16": "bf16", "torch.float64": "f64",
          "torch.int64": "i64", "torch.int32": "i32", "torch.int16": "i16", "torch.int8": "i8",
          "torch.uint8": "u8", "torch.bool": "bool"}


def aval_text(shape, dtype) -> str:
    if isinstance(dtype, tuple):
        return "(" + ", ".join(aval_text(s, d) for s, d in zip(shape, dtype)) + ")"
    return f"{_SHORT.get(str(dtype), str(dtype))}[{','.join(map(str, shape))}]"


def op_text(op) -> str:
    text = str(op)
    return text[len("aten."):] if text.startswith("aten.") else text


def _arg_text(value, names: dict) -> str:
    if isinstance(value, Node):
        return names[id(value)]
    if isinstance(value, tuple):
        return "(" + ", ".join(_arg_text(v, names) for v in value) + ")"
    return repr(value)


def graph_text(graph, donors: tuple = ()) -> str:
    names: dict = {}
    params = {id(d): i for i, d in enumerate(graph.params)}
    policy = f", storage dtypes {graph.policy.name}" if graph.policy is not None else ""
    lines = [f"graph on lazyxla:{graph.device}: {len(graph.order)} nodes, {len(graph.params)} parameters, "
             f"{len(graph.scalars)} runtime scalars{policy}"]
    scalar_index = 0
    aliased: dict = {}      # position -> ids of the nodes read as the DATA node there
    for nid, position in (graph.aliases or {}).items():
        aliased.setdefault(position, []).append(nid)
    for i, node in enumerate(graph.order):
        aval = aval_text(node.shape, node.dtype)
        if node.op is DATA:
            p = params[id(node.data)]
            name = f"p{p}"
            donated = "  (donated)" if p in donors else ""
            stored = node.data.stored_dtype
            if stored != node.dtype:   # held narrower (runtime/storage_dtypes.py)
                donated = f" (held as {_SHORT.get(str(stored), str(stored))}){donated}"
            text = f"{name}: {aval} = parameter {p}{donated}"
        elif node.op is SCALAR:
            name = f"s{scalar_index}"
            scalar_index += 1
            text = f"{name}: {aval} = scalar {node.data!r}"
        elif node.op is GETITEM:
            name = f"v{i}"
            text = f"{name}: {aval} = {names[id(node.inputs[0])]}[{node.args[1]}]"
        else:
            name = f"v{i}"
            args = ", ".join(_arg_text(a, names) for a in node.args)
            if node.kwargs:
                args += (", " if args else "") + ", ".join(
                    f"{k}={_arg_text(v, names)}" for k, v in node.kwargs.items())
            text = f"{name}: {aval} = {op_text(node.op)}({args})"
        names[id(node)] = name
        for nid in aliased.get(i, ()):
            names[nid] = name
        origin = getattr(node, "origin", None)   # provenance (frontend/provenance.py)
        lines.append("  " + text + (f"  # {origin}" if origin else ""))
    outs = ", ".join(names[id(graph.order[p])] for p in graph.outputs)
    lines.append(f"  return ({outs})")
    return "\n".join(lines)
