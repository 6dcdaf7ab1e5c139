"""The graph builder: records a model's forward ops, then derives the rest of the training iteration.

Each op module in `ops/` records its forward op through `GraphBuilder.forward`, declaring its shapes,
FLOPs and which tensors its backward keeps (as in Chainer); a kept tensor is what a paging policy must
bring back before the backward op runs. `GraphBuilder.build()` derives the loss, the backward pass
(summing gradients of tensors with several consumers) and the SGD-with-momentum update from the
recorded forward ops, through the modules of those ops.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .graph import PERSISTENT, Attrs, Graph, GraphError, Kind, Op, Phase, Tensor, nbytes_of
from .ops.add import grad_sum
from .ops.recorder import Output, Saved, Shape
from .ops.sgd_momentum import sgd_momentum
from .ops.softmax_cross_entropy import softmax_cross_entropy


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
    workspace: bool = False  # the kernel takes scratch memory: a workspace tensor of its own, fitted to the room
    scratch: int = 0  # bytes of scratch the kernel needs whatever the room: a workspace tensor of exactly that


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
    workspace: bool = False  # forward and backward kernels take scratch memory
    backward_scratch: int = 0  # bytes the backward kernel needs, whatever the room


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
    def shape(self, t: int) -> Shape:
        return self.tensors[t].shape

    def name(self, t: int) -> str:
        return self.tensors[t].name

    def new_tensor(self, name: str, kind: Kind, shape: tuple[int, ...], dtype: str = "float32",
                   producer: int = PERSISTENT) -> int:
        self.tensors.append(_TensorSpec(name, kind, tuple(int(s) for s in shape), dtype, producer))
        return len(self.tensors) - 1

    def add_op(self, name: str, kind: str, phase: Phase, layer: str, reads: tuple[int, ...],
               outputs: list[Output], updates: tuple[int, ...] = (), flops: int = 0,
               attrs: Attrs = ()) -> tuple[int, list[int]]:
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
                out_shape: Shape, flops: int, keeps: tuple[int, ...] = (), backward_flops: int = 0,
                input_grad_flops: int = 0, saved: tuple[Saved, ...] = (), reads: tuple[int, ...] = (),
                updates: tuple[int, ...] = (), passes_gradient: bool = False,
                attrs: Attrs = (), workspace: bool = False, backward_scratch: int = 0) -> tuple[int, list[int]]:
        """Record a forward op; returns (output, extra saved tensors). `keeps` may name the output
        as -1 and the saved tensors as -2, -3, ... because they do not exist yet. With `workspace`, the
        op and its backward each get a workspace tensor; with `backward_scratch`, the backward gets one of
        those bytes (see `_freeze`)."""
        outputs: list[Output] = [(f"{layer}.out", Kind.ACTIVATION, out_shape, "float32")]
        outputs += [(f"{layer}.{n}", Kind.ACTIVATION, s, d) for n, s, d in saved]
        op, new = self.add_op(layer, kind, Phase.FORWARD, layer, inputs + params + reads, outputs,
                              updates, flops, attrs)
        self.ops[op].workspace = workspace
        y, extra = new[0], new[1:]
        resolved = tuple(new[-k - 1] if k < 0 else k for k in keeps)
        if any(t in self.needs_grad for t in inputs + params):
            self.needs_grad.add(y)
        self.forwards.append(_Forward(op, layer, inputs, params, y, resolved, int(backward_flops),
                                      int(input_grad_flops), passes_gradient, tuple(attrs), workspace,
                                      int(backward_scratch)))
        return y, extra

    # --- the rest of the iteration ----------------------------------------------------------------
    def build(self, logits: int, labels: int) -> Graph:
        _, dlogits = softmax_cross_entropy(self, logits, labels)
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
            outputs: list[Output] = []
            for x in wants:
                spec = self.tensors[x]
                suffix = ".grad" if forward_readers.get(x, 0) == 1 else f".grad[{f.layer}]"
                outputs.append((spec.name + suffix, Kind.GRADIENT, spec.shape, "float32"))
            for p in f.params:
                outputs.append((self.tensors[p].name + ".grad", Kind.GRADIENT, self.shape(p), "float32"))
            flops = f.backward_flops - (0 if wants else f.input_grad_flops)
            op_kind = self.ops[f.op].kind + "_backward"
            # input_grad: whether the first writes are input gradients (not for the first layer)
            op, new = self.add_op(f"{f.layer}.backward", op_kind, Phase.BACKWARD, f.layer,
                                  tuple(dict.fromkeys(f.keeps + (dy,))), outputs, flops=flops,
                                  attrs=f.attrs + (("input_grad", bool(wants)),))
            self.ops[op].workspace, self.ops[op].scratch = f.workspace, f.backward_scratch
            for x, g in zip(wants, new):
                partials.setdefault(x, []).append(g)
            for p, g in zip(f.params, new[len(wants):]):
                param_grads[p] = g
        for layer, ws in self.params.items():
            sgd_momentum(self, layer, tuple(ws), tuple(param_grads[w] for w in ws),
                         tuple(self.momentum[w] for w in ws))
        return self._freeze()

    def _gradient(self, t: int, partials: dict[int, list[int]]) -> int:
        parts = list(dict.fromkeys(partials.get(t, [])))
        if not parts:
            raise GraphError(f"{self.model}: {self.tensors[t].name} gets no gradient; is it used?")
        if len(parts) == 1:
            return parts[0]
        total = grad_sum(self, t, tuple(parts))
        partials[t] = [total]
        return total

    def _freeze(self) -> Graph:
        """The graph, with a workspace tensor for each op whose kernel takes scratch memory, written by the
        op and read by none, so it lives during its op only: one that chooses its algorithm within what it
        is given (attr `workspace`: a convolution) as many bytes as the tensors the op touches, fitted to
        the room by `Graph.fitted`; one that needs a fixed amount (attr `scratch`) those bytes. Workspaces
        come after every other tensor, so a graph without them (`Graph.without_workspaces`) numbers its
        tensors the same."""
        ops = list(self.ops)
        tensors = list(self.tensors)
        for i, o in enumerate(self.ops):
            if o.workspace or o.scratch:
                touched = sum(nbytes_of(tensors[t].shape, tensors[t].dtype) for t in dict.fromkeys(o.reads + o.writes))
                size = touched if o.workspace else o.scratch
                tensors.append(_TensorSpec(f"{o.name}.workspace", Kind.WORKSPACE, (size,), "uint8", i))
                ops[i] = _OpSpec(o.name, o.kind, o.phase, o.layer, o.reads, o.writes + (len(tensors) - 1,),
                                 o.flops, o.attrs + (("workspace" if o.workspace else "scratch", True),),
                                 o.workspace, o.scratch)
        consumers: list[list[int]] = [[] for _ in tensors]
        for i, op in enumerate(ops):
            for t in dict.fromkeys(op.reads):
                consumers[t].append(i)
        nbytes = [nbytes_of(t.shape, t.dtype) for t in tensors]
        frozen = tuple(Tensor(t.name, t.kind, t.shape, t.dtype, nbytes[i], t.producer,
                              tuple(consumers[i])) for i, t in enumerate(tensors))
        # an op's traffic is its operands' bytes: how much of its workspace a kernel touches is its own affair
        traffic = [sum(nbytes[t] for t in dict.fromkeys(o.reads + o.writes) if t < len(self.tensors)) for o in ops]
        return Graph(self.model, self.batch, self.image_size, frozen,
                     tuple(Op(o.name, o.kind, o.phase, o.layer, o.reads, o.writes, o.flops, traffic[i], o.attrs)
                           for i, o in enumerate(ops)))
