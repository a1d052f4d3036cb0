"""``amp.from_torch``: a PyTorch model in, an AMP graph with its weights out, and trained weights back.

torch is imported here lazily, only when a function of this module is called (it is not a dependency of
the package). What imports:

* ``nn.Sequential`` stacks (or lists) of ``nn.Linear`` (with or without bias) and of the layers that an op
  declares as its torch counterpart (``Op.torch_form``: ``nn.ReLU``, ``nn.Tanh``, ``nn.Sigmoid``, ...; the op's
  fields read from the layer's attributes, its parameters from the layer's in the same layout); ``nn.Identity``
  is skipped;
* a recurrent layer first: ``nn.RNN`` (tanh or relu), ``nn.GRU`` or ``nn.LSTM``, one layer, unidirectional,
  ``batch_first=True``. It runs over the whole sequence and its last hidden state (``h_n``, what
  ``output[:, -1]`` holds) feeds the layers after it, as ``[rnn, head]`` in a list.

The model is written as an ``amp.nn`` function (:attr:`TorchImport.source`) and compiled with
``amp.compile``, so the graph opens in the builder as that function. Each torch parameter keeps its own
node: an RNN step is ``Linear 'rnn_ih'`` on the input plus ``Linear 'rnn_hh'`` on the hidden state (two
biases, as torch, so plain SGD moves them as torch does), an LSTM gates its ``lstm_ih + lstm_hh`` (gates i,
f, g, o), a GRU is ``gru_cell`` (Linears ``gru_x`` and ``gru_h``, gates r, z, n). Every Linear holds
``W = weight.T`` and ``b = bias``.

    imported = amp.from_torch(model)                      # loss="cross_entropy" (or "mse")
    data = imported.dataset(x, y, batch_size=32)           # torch layout: (B, F) or (B, L, F), batch first
    result = amp.train(imported.graph, data, params=imported.params, dtype="float64", ...)
    imported.to_torch(result.params)                       # the trained weights, into model.state_dict()
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from amp_notebook.compiler import compile_source, nn
from amp_notebook.compiler.source import Source
from amp_notebook.data.batch import Batch, Dataset
from amp_notebook.errors import AmpError
from amp_notebook.ir.graph import Graph
from amp_notebook.ir.ops import OPS, Op, OpError

LOSSES = {"cross_entropy": "softmax_cross_entropy", "mse": "mse"}
# torch.nn layer name -> the op that declares it as its counterpart (and has an amp.nn form to write it with)
LAYERS: dict[str, type[Op]] = {
    cls.torch_form.module: cls for cls in OPS.values() if cls.torch_form is not None and cls.nn_form is not None
}
_RECURRENT = ("RNN", "GRU", "LSTM")


class TorchImportError(AmpError, ValueError):
    """A torch module that ``from_torch`` cannot import; the message names the module and what is supported."""


@dataclass
class _Binding:
    """Graph parameter ``node``/``key`` is torch parameter ``attr`` of ``module`` (transposed for weights)."""

    node: str
    key: str
    module: Any
    attr: str
    transpose: bool


@dataclass
class TorchImport:
    """The imported model: its graph, its parameters, the Python form it was compiled from, and the way back."""

    graph: Graph
    params: dict[str, dict[str, np.ndarray]]
    source: str
    modules: list[Any]
    sequence: bool
    bindings: list[_Binding] = field(default_factory=list)

    def to_torch(self, params: dict[str, dict[str, np.ndarray]] | None = None) -> Any:
        """Write ``params`` (a ``TrainResult.params``; default the imported ones) into the torch modules'
        parameters, in place; returns the module given to ``from_torch``."""
        import torch

        params = self.params if params is None else params
        with torch.no_grad():
            for b in self.bindings:
                if b.node not in params or b.key not in params[b.node]:
                    raise TorchImportError(f"to_torch: no parameter {b.node}/{b.key} in the parameters given")
                value = np.asarray(params[b.node][b.key])
                target = getattr(b.module, b.attr)
                value = value.T if b.transpose else value
                if tuple(value.shape) != tuple(target.shape):
                    raise TorchImportError(
                        f"to_torch: {b.node}/{b.key} has shape {value.shape}, torch's {b.attr} {tuple(target.shape)}"
                    )
                target.copy_(torch.as_tensor(np.ascontiguousarray(value), dtype=target.dtype))
        return self.modules[0] if len(self.modules) == 1 else self.modules

    def batch(self, x: Any, target: Any) -> Batch:
        """One key from torch-layout arrays: ``x`` (B, F), or (B, L, F) for a recurrent model (batch first, as
        the module reads it), and ``target`` (B,) class ids or (B, out) regression targets."""
        x = np.asarray(x.detach().cpu().numpy() if hasattr(x, "detach") else x)
        target = np.asarray(target.detach().cpu().numpy() if hasattr(target, "detach") else target)
        if self.sequence:
            if x.ndim != 3:
                raise TorchImportError(f"batch: a recurrent model reads x of shape (B, L, F), got {x.shape}")
            return Batch(
                {"x": np.ascontiguousarray(x.transpose(1, 0, 2)), "target": target}, len(x), {"length": int(x.shape[1])}
            )
        if x.ndim != 2:
            raise TorchImportError(f"batch: x of shape (B, F) expected, got {x.shape}")
        return Batch({"x": x, "target": target}, len(x))

    def dataset(
        self, x: Any, target: Any, batch_size: int, val: tuple[Any, Any] | None = None, name: str = "torch_data"
    ) -> Dataset:
        """Keys of ``batch_size`` consecutive instances (the last may be smaller), in order."""

        def keys(xs: Any, ys: Any) -> list[Batch]:
            return [self.batch(xs[i : i + batch_size], ys[i : i + batch_size]) for i in range(0, len(xs), batch_size)]

        return Dataset(name, keys(x, target), keys(*val) if val is not None else [])


def from_torch(module: Any, *, loss: str = "cross_entropy", name: str = "torch_model") -> TorchImport:
    """Import a torch model (see the module docstring); ``loss`` is ``"cross_entropy"`` (integer targets) or
    ``"mse"`` (float targets of the output's width)."""
    try:
        import torch.nn as tnn
    except ImportError as exc:  # pragma: no cover - torch is installed wherever this is tested
        raise TorchImportError("amp.from_torch needs PyTorch: pip install torch") from exc
    if loss not in LOSSES:
        raise TorchImportError(f"from_torch loss: expected one of {sorted(LOSSES)}, got {loss!r}")
    if not name.isidentifier():
        raise TorchImportError(f"from_torch name: expected a Python identifier, got {name!r}")
    modules = list(module) if isinstance(module, list | tuple) else [module]
    layers = _flatten(modules, tnn)
    writer = _Writer()
    sequence = bool(layers) and type(layers[0]).__name__ in _RECURRENT and isinstance(layers[0], tnn.RNNBase)
    if sequence:
        width = _recurrent(writer, layers[0])
        rest = layers[1:]
    else:
        width = _first_width(layers)
        rest = layers
        writer.lines.append("    h = x")
    for i, layer in enumerate(rest, start=1 if sequence else 0):
        width = _feedforward(writer, layer, i, width, tnn)
    if loss == "cross_entropy":
        target_type = "nn.Ints()"
        writer.lines.append("    return nn.softmax_cross_entropy(h, target)")
    else:
        target_type = f"nn.Floats({width})"
        writer.lines.append("    return nn.mse(h, target)")
    x_type = f"nn.Sequence(float, width={writer.input_width})" if sequence else f"nn.Floats({writer.input_width})"
    text = "\n".join([f"def {name}(x: {x_type}, target: {target_type}):", *writer.lines]) + "\n"
    graph = compile_source(Source.from_text(text, name, filename=f"<amp.from_torch {name}>", namespace={"nn": nn}))
    params: dict[str, dict[str, np.ndarray]] = {}
    for b in writer.bindings:
        value = getattr(b.module, b.attr).detach().cpu().numpy()
        params.setdefault(b.node, {})[b.key] = np.array(value.T if b.transpose else value)
    for node in graph.parameterized():
        missing = set(graph.nodes[node].op.param_shapes()) - set(params.get(node, {}))
        assert not missing, f"from_torch: no torch parameter for {node}/{sorted(missing)}"
    return TorchImport(graph, params, text, modules, sequence, writer.bindings)


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.bindings: list[_Binding] = []
        self.input_width: int | None = None

    def bind(self, node: str, module: Any, weight: str, bias: str | None) -> None:
        self.bindings.append(_Binding(node, "W", module, weight, True))
        if bias is not None:
            self.bindings.append(_Binding(node, "b", module, bias, False))


def _flatten(modules: Sequence[Any], tnn: Any) -> list[Any]:
    out: list[Any] = []
    for m in modules:
        if isinstance(m, tnn.Sequential | tnn.ModuleList):
            out.extend(_flatten(list(m), tnn))
        elif isinstance(m, tnn.Identity):
            continue
        else:
            out.append(m)
    if not out:
        raise TorchImportError("from_torch: the model has no layers")
    return out


def _first_width(layers: list[Any]) -> int:
    first = layers[0]
    if type(first).__name__ != "Linear":
        raise TorchImportError(
            f"from_torch: a feed-forward model starts with nn.Linear (the input width), got {type(first).__name__}"
        )
    return int(first.in_features)


def _feedforward(w: _Writer, layer: Any, i: int, width: int | None, tnn: Any) -> int | None:
    kind = type(layer).__name__
    if isinstance(layer, tnn.Linear):
        if w.input_width is None:
            w.input_width = int(layer.in_features)
        if width is not None and width != layer.in_features:
            raise TorchImportError(
                f"from_torch: layer {i} (Linear) reads {layer.in_features} features, but the layer before gives {width}"
            )
        node = f"layer{i}"
        bias = "" if layer.bias is not None else ", bias=False"
        w.lines.append(f"    h = nn.linear(h, {layer.out_features}, name={node!r}{bias})")
        w.bind(node, layer, "weight", "bias" if layer.bias is not None else None)
        return int(layer.out_features)
    if kind in LAYERS and type(layer).__module__.startswith("torch.nn"):
        return _declared_layer(w, layer, i, width, LAYERS[kind])
    if isinstance(layer, tnn.RNNBase):
        raise TorchImportError(f"from_torch: a recurrent layer ({kind}) must come first")
    supported = ", ".join(f"nn.{name}" for name in ["Linear", *LAYERS])
    raise TorchImportError(
        f"from_torch: layer {i} is {kind}; supported are {supported} (and nn.Identity), after an optional nn.RNN / "
        "nn.GRU / nn.LSTM first"
    )


def _declared_layer(w: _Writer, layer: Any, i: int, width: int | None, cls: type[Op]) -> int | None:
    """A layer imported as the op that declares it (``Op.torch_form``): its fields read from the layer, its
    widths from the width flowing in, its parameters bound to the layer's (checked for presence and shape)."""
    form, nn_form, kind = cls.torch_form, cls.nn_form, type(layer).__name__
    assert form is not None and nn_form is not None
    config = {name: getattr(layer, attr) for name, attr in form.fields.items()}
    widths = [f.name for f in cls.fields if f.from_width is not None]
    if widths and width is None:
        raise TorchImportError(f"from_torch: layer {i} ({kind}) needs the width of its input; put an nn.Linear first")
    config.update(dict.fromkeys(widths, width))
    try:
        op = cls(**config)
    except OpError as exc:
        raise TorchImportError(f"from_torch: layer {i} ({kind}) cannot be imported: {exc}") from None
    args = "".join(f", {name}={op.config()[name]!r}" for name in form.fields)
    node = f"layer{i}"
    name = f", name={node!r}" if cls.parameterized else ""
    w.lines.append(f"    h = nn.{nn_form.name}(h{args}{name})")
    shapes = op.param_shapes()
    for key, attr in form.params.items():
        value = getattr(layer, attr, None)
        if value is None:
            raise TorchImportError(
                f"from_torch: layer {i} ({kind}) has no {attr}, which {cls.__name__} learns as {key!r}; build the "
                f"layer with its {attr} (the default)"
            )
        if tuple(value.shape) != shapes[key]:
            raise TorchImportError(
                f"from_torch: layer {i} ({kind}) has {attr} of shape {tuple(value.shape)}; {cls.__name__} over width "
                f"{width} holds {key!r} of shape {shapes[key]} (one value per feature of the last axis)"
            )
        w.bindings.append(_Binding(node, key, layer, attr, False))
    (port,) = op.input_ports()
    return op.infer_widths({port: width}).get("out", width)


def _recurrent(w: _Writer, rnn: Any) -> int:
    kind = type(rnn).__name__
    problems = []
    if rnn.num_layers != 1:
        problems.append(f"num_layers={rnn.num_layers} (stack single layers instead)")
    if rnn.bidirectional:
        problems.append("bidirectional=True")
    if not rnn.batch_first:
        problems.append("batch_first=False (build it with batch_first=True)")
    if getattr(rnn, "proj_size", 0):
        problems.append(f"proj_size={rnn.proj_size}")
    if kind == "GRU" and not rnn.bias:
        problems.append("bias=False for a GRU")
    if problems:
        raise TorchImportError(
            f"from_torch: {kind} with {', '.join(problems)} is not supported (one layer, "
            "unidirectional, batch_first=True)"
        )
    w.input_width = int(rnn.input_size)
    hidden = int(rnn.hidden_size)
    bias = None if not rnn.bias else ""
    flag = "" if rnn.bias else ", bias=False"
    w.lines.append(f"    h = nn.zeros({hidden}, name='h0')")
    if kind == "LSTM":
        w.lines.append(f"    c = nn.zeros({hidden}, name='c0')")
    w.lines.append("    for x_t in x:")
    if kind == "RNN":
        act = "relu" if rnn.nonlinearity == "relu" else "tanh"
        w.lines.append(
            f"        h = nn.{act}(nn.linear(x_t, {hidden}, name='rnn_ih'{flag}) + "
            f"nn.linear(h, {hidden}, name='rnn_hh'{flag}))"
        )
        w.bind("rnn_ih", rnn, "weight_ih_l0", None if bias is None else "bias_ih_l0")
        w.bind("rnn_hh", rnn, "weight_hh_l0", None if bias is None else "bias_hh_l0")
    elif kind == "GRU":
        w.lines.append(f"        h = nn.gru_cell(x_t, h, {hidden}, name='gru')")
        w.bind("gru_x", rnn, "weight_ih_l0", "bias_ih_l0")
        w.bind("gru_h", rnn, "weight_hh_l0", "bias_hh_l0")
    else:
        four = 4 * hidden
        w.lines += [
            f"        gates = nn.linear(x_t, {four}, name='lstm_ih'{flag}) + "
            f"nn.linear(h, {four}, name='lstm_hh'{flag})",
            f"        i, f, g, o = nn.split(gates, [{hidden}, {hidden}, {hidden}, {hidden}])",
            "        c = nn.sigmoid(f) * c + nn.sigmoid(i) * nn.tanh(g)",
            "        h = nn.sigmoid(o) * nn.tanh(c)",
        ]
        w.bind("lstm_ih", rnn, "weight_ih_l0", None if bias is None else "bias_ih_l0")
        w.bind("lstm_hh", rnn, "weight_hh_l0", None if bias is None else "bias_hh_l0")
    return hidden
