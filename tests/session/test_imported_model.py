"""The Python API on a model imported from an ONNX file: planned and simulated as the built-in it mirrors,
under every policy, with the bound worked out from the imported graph itself (not built again by name)."""

import pytest
from onnx_models import Net, resnet18

from vmexplorer.config import Config
from vmexplorer.graph import build_graph, import_onnx
from vmexplorer.plan import PlanError
from vmexplorer.policies import POLICIES
from vmexplorer.session.planned import plan_for
from vmexplorer.simulator import H100_DEFAULT


def _figures(graph, policy: str):
    options = {"search_steps": 20} if policy == "tuned" else {}
    config = Config(graph.model, graph.batch, graph.image_size, graph.footprint // 2, policy, options)
    try:
        planned = plan_for(config, H100_DEFAULT, graph=graph)
    except PlanError as e:
        return str(e)
    return planned.simulated().summary, planned.bound


# joint is left out for time only: its search takes seconds per graph (it matched when tried)
@pytest.mark.parametrize("policy", sorted(set(POLICIES) - {"joint"}))
def test_an_imported_model_plans_and_simulates_as_its_built_in_twin(policy: str):
    net = Net()
    imported = import_onnx(net.bytes(resnet18(net)), 4, image_size=112)
    assert _figures(imported, policy) == _figures(build_graph("resnet18", 4, 112), policy)
