"""A kernel's scratch memory is a graph tensor: counted in the footprint, fitted to the room a plan has."""

from __future__ import annotations

import pytest

from vmexplorer.graph import Kind, build_graph
from vmexplorer.graph.graph import WORKSPACE_FLOOR

CONFIGS = (("alexnet", 4, 96), ("vgg11", 2, 64), ("resnet18", 2, 64), ("resnet50", 2, 64))


def _operands(g, op: int) -> int:
    return sum(g.tensors[t].nbytes for t in g.ops[op].touches if g.tensors[t].kind is not Kind.WORKSPACE)


@pytest.mark.parametrize("model,batch,size", CONFIGS)
def test_every_convolution_and_its_backward_has_a_workspace_as_large_as_its_operands(model, batch, size) -> None:
    g = build_graph(model, batch, size)
    for i, op in enumerate(g.ops):
        ws = [t for t in op.writes if g.tensors[t].kind is Kind.WORKSPACE]
        if op.kind == "max_pool2d_backward":
            continue  # test_an_overlapping_max_pool_s_backward_has_the_argmax_s_bytes_as_its_workspace
        if not op.kind.startswith("conv2d"):
            assert ws == [] and g.workspace_bytes[i] == 0, op.name
            continue
        (t,) = ws
        tensor = g.tensors[t]
        assert tensor.producer == i and tensor.consumers == () and g.last_use[t] == i  # alive during its op only
        assert tensor.dtype == "uint8" and tensor.shape == (tensor.nbytes,) == (_operands(g, i),)
        assert g.workspace_bytes[i] == tensor.nbytes
        assert op.bytes_touched == _operands(g, i)  # an op's traffic is its operands'


@pytest.mark.parametrize("model,batch,size", CONFIGS)
def test_an_overlapping_max_pool_s_backward_has_the_argmax_s_bytes_as_its_workspace(model, batch, size) -> None:
    g = build_graph(model, batch, size)
    pools = [i for i, op in enumerate(g.ops) if op.kind == "max_pool2d_backward"]
    assert pools
    for i in pools:
        op, attrs = g.ops[i], dict(g.ops[i].attrs)
        y = g.tensors[op.reads[1]]
        x_side, k, s, p = g.tensors[op.reads[0]].shape[2], attrs["kernel"], attrs["stride"], attrs["padding"]
        overlapping = not (s == k and p == 0 and x_side == y.shape[2] * k)
        assert g.workspace_bytes[i] == (2 * y.nbytes // 4 if overlapping else 0), op.name  # a uint16 per output
        assert ("scratch" in attrs) == overlapping
        # what it needs, whatever the room: fitting leaves it whole
        assert g.fitted(g.min_capacity[0]).workspace_bytes[i] == g.workspace_bytes[i]


@pytest.mark.parametrize("model,batch,size", CONFIGS)
def test_a_graph_without_workspaces_numbers_every_other_tensor_the_same(model, batch, size) -> None:
    g = build_graph(model, batch, size)
    old = build_graph(model, batch, size, workspaces=False)
    assert not old.workspaces and g.workspaces and old.key == g.key
    assert old.tensors == tuple(t for t in g.tensors if t.kind is not Kind.WORKSPACE) == g.tensors[:len(old.tensors)]
    assert [(o.name, o.reads, o.flops, o.bytes_touched) for o in old.ops] == \
        [(o.name, o.reads, o.flops, o.bytes_touched) for o in g.ops]
    assert old.footprint < g.footprint  # the scratch the kernels take now counts
    assert g.without_workspaces() == old and g.fitted(g.footprint // 2).without_workspaces() == old


@pytest.mark.parametrize("share", [1.0, 0.75, 0.5, 0.3])
@pytest.mark.parametrize("model,batch,size", CONFIGS)
def test_fitted_workspaces_leave_half_of_what_the_operands_leave_of_the_room(model, batch, size, share) -> None:
    g = build_graph(model, batch, size)
    room = int(g.footprint * share)
    f = g.fitted(room)
    assert f.capacity == room and f.full is g and f.footprint == g.footprint
    assert [t.name for t in f.tensors] == [t.name for t in g.tensors] and f.ops == g.ops
    for i in range(len(g.ops)):
        if not g.workspace_bytes[i]:
            continue
        got = f.workspace_bytes[i]
        assert WORKSPACE_FLOOR <= got <= max(g.workspace_bytes[i], WORKSPACE_FLOOR)
        assert got == g.workspace_bytes[i] or got == WORKSPACE_FLOOR or \
            _operands(g, i) + 2 * got <= room < _operands(g, i) + 2 * got + 2 * 256
        if _operands(g, i) + WORKSPACE_FLOOR <= room:
            assert f.working_sets[i] <= room  # the op and its workspace fit the room
    assert f.fitted(room) is f and g.fitted(room) is f  # worked out once per room
    assert f.sized_for(room // 2) is f and g.sized_for(room) is f  # a fitted graph is the plan's


def test_at_its_footprint_a_model_keeps_every_workspace_whole() -> None:
    for model, batch, size in CONFIGS:
        g = build_graph(model, batch, size)
        assert max(g.fitted(g.footprint).live_bytes) <= g.footprint
        assert g.fitted(10 * g.footprint).workspace_bytes == g.workspace_bytes


def test_a_graph_travels_without_the_fitted_graphs_it_has_cached() -> None:
    import pickle

    g = build_graph("resnet18", 2, 64)
    fitted = [g.fitted(int(g.footprint * share)) for share in (0.9, 0.7, 0.5)]
    back = pickle.loads(pickle.dumps(fitted[-1]))
    assert back == fitted[-1] and back.full == g and "_fits" not in back.full.__dict__
    assert len(pickle.dumps(g)) < 1.5 * len(pickle.dumps(build_graph("resnet18", 2, 64)))
