"""The Python API in a few calls, for a notebook or a script (docs/api.md walks through it).

    from vmexplorer import api
    planned = api.plan("vgg19", 64, "50%", "tuned", cost_model="h200")  # graph -> plan, searched in the simulator
    session = planned.simulated()                                        # -> simulation, as a session
    session.summary["iteration_ns"], planned.bound.lower_bound_ns

Each function here is a short path through the stages' own functions, which stay the reference: the graph
(`graph.build_graph`), the plan (`policies.compile_plan`, or `session.planned.plan_for` for a configuration),
the simulation (`simulator.simulate`, `records.summarize`, `simulator.bound.lower_bound`), the session
(`session.new_session`, `save_session`, `load_session`) and the figure (`plots.timeline.timeline_figure`).
`cost_model` and `simulation` build what a policy that searches (`tuned`, `joint`) is given to search with,
with the default cost model or a named one (`h200`, `h100`: `simulator.named`). Nothing heavy is imported
until a function is called: Bokeh only by `figure`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .graph import Graph, Recompute
    from .plan import Move
    from .policies import Simulation
    from .session import Session
    from .session.planned import Planned
    from .simulator import CostModel


def cost_model(name: str | CostModel | None = None, graph: Graph | None = None) -> CostModel:
    """A cost model: the default (None: an uncalibrated H100), a named one (`"h200"`, `"h100"`: the GPU's
    samples' model of `graph` where they ran it, else its rates), or the one given. KeyError for an unknown
    name, naming the choices."""
    from .simulator import H100_DEFAULT, CostModel
    from .simulator.named import named_cost_model

    if isinstance(name, CostModel):
        return name
    return H100_DEFAULT if name is None else named_cost_model(name, graph)


def simulation(cost: str | CostModel | None = None, graph: Graph | None = None,
               report: Callable[[str], None] | None = None) -> Simulation:
    """What `compile_plan` needs for a policy that searches in the simulator (`tuned`, `joint`): the simulator
    and the bound with `cost` (as `cost_model` takes it). `report` is told how the search went."""
    from .policies import Simulation
    from .simulator import simulate
    from .simulator.bound import lower_bound

    return Simulation(simulate, lower_bound, cost_model(cost, graph), report)


def plan(model: str | Graph, batch: int | None, capacity: int | str, policy: str,
         options: Mapping[str, Any] | None = None, *, mechanism: str = "uvm", cost_model: str | CostModel | None = None,
         moves: Sequence[Move] = (), recomputes: Sequence[Recompute] = (), image_size: int | None = None) -> Planned:
    """A configuration's plan under a cost model, as the command line and the app make it
    (`session.planned.plan_for`): searched there for `tuned`, its copies ordered there under swap.
    `model` is a model's name (with `batch`, and `image_size` or the default) or a graph (`batch` None);
    `capacity` is bytes or text as `--capacity` takes it ("50%", "3GiB"). The result has `.plan`, `.graph`,
    `.bound` (the least time any schedule takes, under the same model), `.reports` and `.simulated()`."""
    from .config import Config, Mechanism
    from .graph import DEFAULT_IMAGE_SIZE, build_graph
    from .session.planned import plan_for
    from .units import parse_bytes

    if isinstance(model, str):
        if batch is None:
            raise TypeError("plan needs a batch with a model's name")
        graph = build_graph(model, batch, image_size or DEFAULT_IMAGE_SIZE)
    else:
        graph = model
    room = capacity if isinstance(capacity, int) else parse_bytes(capacity, graph.footprint)
    config = Config(graph.model, graph.batch, graph.image_size, room, policy, dict(options or {}),
                    Mechanism(mechanism), graph.workspaces)
    return plan_for(config, _cost(cost_model, graph), moves, graph=graph, recomputes=recomputes)


def _cost(name: str | CostModel | None, graph: Graph) -> CostModel:
    return cost_model(name, graph)


def figure(session: Session, x_axis: str = "time") -> Any:
    """The timeline the app draws of `session` (ops, transfers, faults, resident bytes): a Bokeh layout to
    show in a notebook (`bokeh.io.show`) or save (`bokeh.io.save`). `x_axis`: "time" or "op"."""
    from .plots.timeline import timeline_figure

    return timeline_figure(session, x_axis)


__all__ = ["cost_model", "figure", "plan", "simulation"]
