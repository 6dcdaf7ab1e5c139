"""Layers as graph builders: each forward op declares its shapes, FLOPs and what its backward reads.

As in Chainer, a layer says which tensors its backward keeps (`keeps`); that declaration is exactly
what a paging policy needs, because a kept tensor is what must come back before the backward op runs.
`GraphBuilder.build()` derives the loss, the backward pass (summing gradients of tensors with several
consumers) and the SGD-with-momentum update from the recorded forward ops.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .graph import PERSISTENT, Attrs, Graph, GraphError, Kind, Op, Phase, Tensor, nbytes_of


@dataclass
class _TensorSpec:
    name: str
    kind: Kind
    shape: tuple[int, ...]
    dtype: str
    producer: int


@dataclass
class _OpSpec:
    name: str
    kind: str
    phase: Phase
    layer: str
    reads: tuple[int, ...]
    writes: tuple[int, ...]
    flops: int
    attrs: Attrs = ()


@dataclass(frozen=True)
class _Forward:
    op: int
    layer: str
    inputs: tuple[int, ...]  # differentiable inputs
    params: tuple[int, ...]
    output: int
    keeps: tuple[int, ...]  # what backward reads besides the output gradient
    backward_flops: int  # with every input needing a gradient
    input_grad_flops: int  # the part of backward_flops spent on input gradients
    passes_gradient: bool = False  # backward is the identity (residual add): no op, no tensor
    attrs: Attrs = ()  # copied onto the backward op, which adds input_grad


@dataclass
class GraphBuilder:
    model: str
    batch: int
    image_size: int
    tensors: list[_TensorSpec] = field(default_factory=list)
    ops: list[_OpSpec] = field(default_factory=list)
    forwards: list[_Forward] = field(default_factory=list)
    params: dict[str, list[int]] = field(default_factory=dict)  # layer -> weights, in creation order
    momentum: dict[int, int] = field(default_factory=dict)
    needs_grad: set[int] = field(default_factory=set)

    # --- primitives -------------------------------------------------------------------------------
    def shape(self, t: int) -> tuple[int, ...]:
        return self.tensors[t].shape

    def new_tensor(self, name: str, kind: Kind, shape: tuple[int, ...], dtype: str = "float32",
                   producer: int = PERSISTENT) -> int:
        self.tensors.append(_TensorSpec(name, kind, tuple(int(s) for s in shape), dtype, producer))
        return len(self.tensors) - 1

    def add_op(self, name: str, kind: str, phase: Phase, layer: str, reads: tuple[int, ...],
               outputs: list[tuple[str, Kind, tuple[int, ...], str]], updates: tuple[int, ...] = (),
               flops: int = 0, attrs: Attrs = ()) -> tuple[int, list[int]]:
        op = len(self.ops)
        new = [self.new_tensor(n, k, s, d, producer=op) for n, k, s, d in outputs]
        self.ops.append(_OpSpec(name, kind, phase, layer, tuple(reads), tuple(new) + tuple(updates),
                                int(flops), tuple(attrs)))
        return op, new

    def input(self, name: str, shape: tuple[int, ...], dtype: str = "float32") -> int:
        return self.new_tensor(name, Kind.INPUT, shape, dtype)

    def param(self, layer: str, name: str, shape: tuple[int, ...]) -> int:
        w = self.new_tensor(f"{layer}.{name}", Kind.WEIGHT, shape)
        self.params.setdefault(layer, []).append(w)
        self.momentum[w] = self.new_tensor(f"{layer}.{name}.momentum", Kind.OPTIMIZER_STATE, shape)
        self.needs_grad.add(w)
        return w

    def forward(self, kind: str, layer: str, inputs: tuple[int, ...], params: tuple[int, ...],
                out_shape: tuple[int, ...], flops: int, keeps: tuple[int, ...] = (),
                backward_flops: int = 0, input_grad_flops: int = 0,
                saved: list[tuple[str, tuple[int, ...], str]] = (),  # type: ignore[assignment]
                reads: tuple[int, ...] = (), updates: tuple[int, ...] = (),
                passes_gradient: bool = False, attrs: Attrs = ()) -> tuple[int, list[int]]:
        """Record a forward op; returns (output, extra saved tensors). `keeps` may name the output
        as -1 and the saved tensors as -2, -3, ... because they do not exist yet."""
        outputs = [(f"{layer}.out", Kind.ACTIVATION, out_shape, "float32")]
        outputs += [(f"{layer}.{n}", Kind.ACTIVATION, s, d) for n, s, d in saved]
        op, new = self.add_op(layer, kind, Phase.FORWARD, layer, inputs + params + reads, outputs,
                              updates, flops, attrs)
        y, extra = new[0], new[1:]
        resolved = tuple(new[-k - 1] if k < 0 else k for k in keeps)
        if any(t in self.needs_grad for t in inputs + params):
            self.needs_grad.add(y)
        self.forwards.append(_Forward(op, layer, inputs, params, y, resolved, int(backward_flops),
                                      int(input_grad_flops), passes_gradient, tuple(attrs)))
        return y, extra

    # --- the rest of the iteration ----------------------------------------------------------------
    def build(self, logits: int, labels: int) -> Graph:
        n_classes = self.shape(logits)[1]
        _, (loss, dlogits) = self.add_op(
            "loss", "softmax_cross_entropy", Phase.LOSS, "loss", (logits, labels),
            [("loss.value", Kind.ACTIVATION, (), "float32"),
             (f"{self.tensors[logits].name}.grad", Kind.GRADIENT, self.shape(logits), "float32")],
            flops=6 * self.batch * n_classes)
        forward_readers: dict[int, int] = {}
        for f in self.forwards:
            for x in f.inputs:
                forward_readers[x] = forward_readers.get(x, 0) + 1
        partials: dict[int, list[int]] = {logits: [dlogits]}
        param_grads: dict[int, int] = {}
        for f in reversed(self.forwards):
            dy = self._gradient(f.output, partials)
            if f.passes_gradient:
                for x in f.inputs:
                    partials.setdefault(x, []).append(dy)
                continue
            wants = [x for x in f.inputs if x in self.needs_grad]
            outputs = []
            for x in wants:
                spec = self.tensors[x]
                suffix = ".grad" if forward_readers.get(x, 0) == 1 else f".grad[{f.layer}]"
                outputs.append((spec.name + suffix, Kind.GRADIENT, spec.shape, "float32"))
            for p in f.params:
                outputs.append((self.tensors[p].name + ".grad", Kind.GRADIENT, self.shape(p), "float32"))
            flops = f.backward_flops - (0 if wants else f.input_grad_flops)
            op_kind = self.ops[f.op].kind + "_backward"
            # input_grad: whether the first writes are input gradients (not for the first layer)
            _, new = self.add_op(f"{f.layer}.backward", op_kind, Phase.BACKWARD, f.layer,
                                 tuple(dict.fromkeys(f.keeps + (dy,))), outputs, flops=flops,
                                 attrs=f.attrs + (("input_grad", bool(wants)),))
            for x, g in zip(wants, new):
                partials.setdefault(x, []).append(g)
            for p, g in zip(f.params, new[len(wants):]):
                param_grads[p] = g
        for layer, ws in self.params.items():
            reads = tuple(t for w in ws for t in (w, param_grads[w], self.momentum[w]))
            updates = tuple(t for w in ws for t in (w, self.momentum[w]))
            numel = sum(_numel(self.shape(w)) for w in ws)
            self.add_op(f"{layer}.sgd", "sgd_momentum", Phase.UPDATE, layer, reads, [], updates,
                        flops=4 * numel)
        return self._freeze()

    def _gradient(self, t: int, partials: dict[int, list[int]]) -> int:
        parts = list(dict.fromkeys(partials.get(t, [])))
        if not parts:
            raise GraphError(f"{self.model}: {self.tensors[t].name} gets no gradient; is it used?")
        if len(parts) == 1:
            return parts[0]
        spec = self.tensors[t]
        _, (total,) = self.add_op(f"{spec.name}.grad_sum", "add", Phase.BACKWARD,
                                  spec.name.rsplit(".", 1)[0], tuple(parts),
                                  [(spec.name + ".grad", Kind.GRADIENT, spec.shape, "float32")],
                                  flops=_numel(spec.shape) * (len(parts) - 1))
        partials[t] = [total]
        return total

    def _freeze(self) -> Graph:
        consumers: list[list[int]] = [[] for _ in self.tensors]
        for i, op in enumerate(self.ops):
            for t in dict.fromkeys(op.reads):
                consumers[t].append(i)
        nbytes = [nbytes_of(t.shape, t.dtype) for t in self.tensors]
        tensors = tuple(Tensor(t.name, t.kind, t.shape, t.dtype, nbytes[i], t.producer,
                               tuple(consumers[i])) for i, t in enumerate(self.tensors))
        ops = tuple(Op(o.name, o.kind, o.phase, o.layer, o.reads, o.writes, o.flops,
                       sum(nbytes[t] for t in dict.fromkeys(o.reads + o.writes)), o.attrs) for o in self.ops)
        return Graph(self.model, self.batch, self.image_size, tensors, ops)


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _out_size(b: GraphBuilder, layer: str, size: int, k: int, stride: int, pad: int) -> int:
    out = (size + 2 * pad - k) // stride + 1
    if out < 1:
        raise GraphError(f"{b.model}: image size {b.image_size} is too small: {layer} gets a "
                         f"{size}x{size} input for a {k}x{k} window; try a larger --image-size")
    return out


# --- layers: forward, and what backward keeps, side by side ---------------------------------------
def conv2d(b: GraphBuilder, x: int, layer: str, out_channels: int, kernel: int, stride: int = 1,
           padding: int = 0, bias: bool = True) -> int:
    n, c, h, w = b.shape(x)
    ho = _out_size(b, layer, h, kernel, stride, padding)
    wo = _out_size(b, layer, w, kernel, stride, padding)
    weight = b.param(layer, "weight", (out_channels, c, kernel, kernel))
    params = (weight, b.param(layer, "bias", (out_channels,))) if bias else (weight,)
    macs = n * out_channels * ho * wo * c * kernel * kernel
    bias_flops = n * out_channels * ho * wo if bias else 0
    # backward: dgrad reads the weight, wgrad reads the input; both read dy
    y, _ = b.forward("conv2d", layer, (x,), params, (n, out_channels, ho, wo), 2 * macs + bias_flops,
                     keeps=(x, weight), backward_flops=4 * macs + bias_flops, input_grad_flops=2 * macs,
                     attrs=(("kernel", kernel), ("stride", stride), ("padding", padding), ("bias", bias)))
    return y


def linear(b: GraphBuilder, x: int, layer: str, out_features: int) -> int:
    n = b.shape(x)[0]
    in_features = _numel(b.shape(x)) // n  # flatten is a view: no op, no copy
    weight = b.param(layer, "weight", (out_features, in_features))
    bias = b.param(layer, "bias", (out_features,))
    macs = n * in_features * out_features
    y, _ = b.forward("linear", layer, (x,), (weight, bias), (n, out_features), 2 * macs + n * out_features,
                     keeps=(x, weight), backward_flops=4 * macs + n * out_features,
                     input_grad_flops=2 * macs, attrs=(("bias", True),))
    return y


def relu(b: GraphBuilder, x: int, layer: str) -> int:
    numel = _numel(b.shape(x))
    y, _ = b.forward("relu", layer, (x,), (), b.shape(x), numel, keeps=(-1,),  # dx = dy * (y > 0)
                     backward_flops=numel, input_grad_flops=numel)
    return y


def max_pool2d(b: GraphBuilder, x: int, layer: str, kernel: int, stride: int, padding: int = 0) -> int:
    n, c, h, w = b.shape(x)
    ho, wo = (_out_size(b, layer, s, kernel, stride, padding) for s in (h, w))
    out = n * c * ho * wo
    # cuDNN's pooling backward takes x, y and dy (no index tensor)
    y, _ = b.forward("max_pool2d", layer, (x,), (), (n, c, ho, wo), out * kernel * kernel,
                     keeps=(x, -1), backward_flops=out * kernel * kernel + n * c * h * w,
                     input_grad_flops=out * kernel * kernel + n * c * h * w,
                     attrs=(("kernel", kernel), ("stride", stride), ("padding", padding)))
    return y


def adaptive_avg_pool2d(b: GraphBuilder, x: int, layer: str, size: int) -> int:
    n, c, h, w = b.shape(x)
    work = n * c * max(h * w, size * size)
    y, _ = b.forward("adaptive_avg_pool2d", layer, (x,), (), (n, c, size, size), work, keeps=(),
                     backward_flops=work, input_grad_flops=work, attrs=(("size", size),))
    return y


def batch_norm2d(b: GraphBuilder, x: int, layer: str) -> int:
    n, c, h, w = b.shape(x)
    gamma = b.param(layer, "weight", (c,))
    beta = b.param(layer, "bias", (c,))
    running = tuple(b.new_tensor(f"{layer}.{s}", Kind.BUFFER, (c,)) for s in ("running_mean", "running_var"))
    numel = n * c * h * w
    y, _ = b.forward("batch_norm2d", layer, (x,), (gamma, beta), (n, c, h, w), 8 * numel,
                     keeps=(x, gamma, -2, -3), backward_flops=12 * numel, input_grad_flops=8 * numel,
                     saved=[("saved_mean", (c,), "float32"), ("saved_invstd", (c,), "float32")],
                     reads=running, updates=running, attrs=(("eps", 1e-5), ("momentum", 0.1)))
    return y


def dropout(b: GraphBuilder, x: int, layer: str) -> int:
    numel = _numel(b.shape(x))
    y, _ = b.forward("dropout", layer, (x,), (), b.shape(x), 2 * numel, keeps=(-2,),
                     backward_flops=numel, input_grad_flops=numel,
                     saved=[("mask", b.shape(x), "uint8")], attrs=(("p", 0.5),))
    return y


def add(b: GraphBuilder, x: int, y: int, layer: str) -> int:
    if b.shape(x) != b.shape(y):
        raise GraphError(f"{b.model}: {layer} adds {b.shape(x)} to {b.shape(y)}")
    out, _ = b.forward("add", layer, (x, y), (), b.shape(x), _numel(b.shape(x)), passes_gradient=True)
    return out
