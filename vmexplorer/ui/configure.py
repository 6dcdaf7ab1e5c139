"""What to simulate: model, batch, capacity (with the least it can be), policy and the policy's knobs,
mechanism, each drawn from the registry. `draw` sets them to the shown session's configuration;
Simulate plans and simulates them through `AppState.simulate_config`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import panel as pn
import param

from ..config import Mechanism, capacity_text, share_of_footprint
from ..graph import MODELS, Graph, GraphError
from ..policies import POLICIES, OptionSpec
from ..session.plan_format import FOREIGN_POLICY
from ..units import format_bytes
from .state import AppState, store_param
from .widgets import Text, tip, widget


def _now(method: Callable[..., Any], *args: Any) -> None:
    method(*args)


class Configure(pn.viewable.Viewer):
    state: AppState = store_param()
    act = param.Callable(default=_now, doc="runs a store method as the page's actions run")

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.model = widget(pn.widgets.Select, "Model", options=list(MODELS))
        self.batch = widget(pn.widgets.IntInput, "Batch", start=1, value=64)
        self.capacity = widget(pn.widgets.TextInput, "Capacity (bytes, e.g. 3GiB, or % of the footprint)",
                               value="50%", max_length=40)
        self.capacity_help = Text(styles={"font-size": "0.85em"})
        self.policy = widget(pn.widgets.Select, "Policy", options=list(POLICIES), value="autovm")
        self.policy_help = Text(styles={"font-size": "0.85em"})
        self.mechanism = widget(pn.widgets.RadioButtonGroup, "Mechanism", options=[m.value for m in Mechanism],
                                value=Mechanism.UVM.value)
        self.mechanism_help = Text(styles={"font-size": "0.85em"}, object=(
            "uvm: unified memory; the driver faults data in and migrates one direction at a time. swap: a "
            "device pool of the capacity and pinned copies, both directions at once"))
        self.knobs = pn.Column()
        self.knob_widgets: dict[str, Any] = {}
        self.knobs_for = ""  # the policy whose knobs are drawn
        self.simulate = widget(pn.widgets.Button, "Simulate", button_type="primary")
        self.simulate.on_click(lambda _: self._simulate())
        pn.bind(self._draw_knobs_of, self.policy, watch=True)
        pn.bind(self._draw_capacity_help, self.model, self.batch, watch=True)

    def _simulate(self) -> None:
        options = {name: w.value for name, w in self.knob_widgets.items()}
        self.act(self.state.simulate_config, self.model.value, self.batch.value, self.capacity.value,
                 self.policy.value, options, self.mechanism.value)

    def draw(self) -> None:
        """Set every field to the shown session's configuration."""
        s = self.state.session
        if s is None:
            return
        p = s.plan
        # a model from a file is one more choice while its session is shown (its session carries its graph)
        self.model.options = list(MODELS) + ([p.model] if p.model not in MODELS else [])
        self.model.value, self.batch.value, self.policy.value = p.model, p.batch, p.policy
        self.mechanism.value = str(p.mechanism)
        self.capacity.value = capacity_text(p.capacity, s.graph.footprint)
        self.draw_knobs(p.options)
        foreign = next((n for n in s.notes if n.startswith(FOREIGN_POLICY)), None) if p.policy == "manual" else None
        # a policy this install lacks made it: said where the policy is chosen
        summary = POLICIES[p.policy].summary
        self.policy_help.object = summary if foreign is None else f"{summary}. This session was {foreign}"
        self._show_capacity_help(s.graph)  # the shown graph: a drag must not build it again

    def _draw_knobs_of(self, policy: str) -> None:
        self.draw_knobs()

    def draw_knobs(self, values: Mapping[str, Any] | None = None) -> None:
        spec = POLICIES[self.policy.value]  # the loader holds a session's policy and options to the registry
        wanted = {name: (values or {}).get(name, opt.default) for name, opt in spec.options.items()}
        if self.knobs_for == spec.name and {n: w.value for n, w in self.knob_widgets.items()} == wanted:
            return  # an edit: the same knobs at the same values, and new widgets would be new models
        self.knobs_for = spec.name
        self.policy_help.object = spec.summary
        self.knob_widgets = {name: _knob(name, opt, wanted[name]) for name, opt in spec.options.items()}
        self.knobs.objects = list(self.knob_widgets.values())

    def _draw_capacity_help(self, model: str, batch: int | None) -> None:
        try:
            g = self.state.model_graph(model, int(batch or 0))
        except (GraphError, ValueError, TypeError) as e:
            self.capacity_help.object = f"({e})"
            return
        self._show_capacity_help(g)

    def _show_capacity_help(self, g: Graph) -> None:
        need, op = g.min_capacity
        self.capacity_help.object = (f"minimum {format_bytes(need)} ({share_of_footprint(need, g.footprint):.0f}%, "
                                     f"{g.ops[op].name}); footprint {format_bytes(g.footprint)}")

    def __panel__(self) -> Any:
        return pn.Column(self.model, self.batch, self.capacity, self.capacity_help,
                         pn.Row(self.policy, tip("uvm", "autovm", "belady", "vdnn", "tuned", "checkpoint", "joint",
                                                 "exact")),
                         self.policy_help,
                         pn.Row(self.mechanism, tip("uvm", "swap")), self.mechanism_help, self.knobs, self.simulate,
                         sizing_mode="stretch_width")


def _knob(name: str, opt: OptionSpec, value: Any) -> Any:
    label = f"{name.replace('_', ' ')}: {opt.help}"
    if opt.choices:
        return widget(pn.widgets.Select, label, options=list(opt.choices), value=value)
    if opt.type is bool:  # a text box would hand the policy "False", which bool() reads as True
        return widget(pn.widgets.Checkbox, label, value=bool(value))
    if opt.type is int:
        return widget(pn.widgets.IntInput, label, value=int(value), start=opt.minimum,
                      end=None if opt.maximum is None else int(opt.maximum))
    if opt.type is float:
        return widget(pn.widgets.FloatInput, label, value=float(value), start=opt.minimum, end=opt.maximum)
    return widget(pn.widgets.TextInput, label, value=str(value))
