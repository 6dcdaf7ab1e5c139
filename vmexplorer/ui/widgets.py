"""What every panel draws with: a text pane that shows text as text, widgets labelled the way this Panel
names labels, the glossary a student hovers for a word, and the type sizes of the projector mode."""

from __future__ import annotations

from html import escape
from typing import Any

import panel as pn

# The words a class meets on the page, each said plainly once; the panels put a tip beside where they use
# them (`tip`), and the sidebar lists them all.
GLOSSARY = {
    "demand fault": "A kernel touched memory that was on the host: the GPU stops, the driver brings the page "
                    "over PCIe, and the kernel goes on. The slowest way to move bytes.",
    "eviction": "Bytes copied from the GPU to the host to make room: by the plan (an offload) or by the driver "
                "when the GPU is full (least recently used first).",
    "offload": "A planned eviction: the plan sends a tensor to the host after its last use for a while (▼).",
    "prefetch": "A planned copy back to the GPU, issued ahead of the tensor's next use so the kernel does "
                "not wait (▲).",
    "bound": "The least time any schedule could take at this capacity: the bytes that must move each way at "
             "the fastest rates measured, or the compute, whichever is longer. No plan runs below it.",
    "capacity": "The GPU memory the run may use. It is emulated: the run keeps its resident bytes under it on a "
                "larger GPU.",
    "uvm": "Unified (managed) memory: one address space on host and GPU; the driver moves pages, one "
           "direction at a time. Also NVIDIA's default policy: demand faults and the driver's evictions.",
    "swap": "A device pool of the capacity and pinned host memory; copies move both directions at once.",
    "autovm": "Reads the training graph: offloads feature maps after their last forward use and prefetches "
              "them before the backward pass needs them.",
    "belady": "Evicts the tensor needed again furthest in the future (Belady's MIN): the least traffic.",
    "vdnn": "Offloads the input of every convolution (vDNN, 2016).",
    "tuned": "A search in the simulator from the best of the other plans.",
    "recompute": "The third way to make room: drop a feature map after the forward pass and run the op that made "
                 "it again before the backward pass reads it. Memory paid for in compute, not in copies (drawn "
                 "hatched).",
    "checkpoint": "PyTorch's checkpoint_sequential: cuts the forward pass into segments and recomputes the feature "
                  "maps of all but the last in the backward pass.",
    "joint": "A search in the simulator for which feature maps to recompute, from checkpoint_sequential's choices, "
             "with belady's trips for what still does not fit.",
    "exact": "An integer program solved with HiGHS (Checkmate's, POET's): for each feature map, keep, recompute or "
             "move, the least re-run and copy time that fits; seconds to solve, its gap to optimal reported.",
    "CUPTI": "NVIDIA's profiling interface: it counted the unified-memory migrations and page faults, and "
             "timed the kernels.",
    "NVML": "NVIDIA's management library: it sampled the device's memory use and PCIe throughput.",
    "UM counted": "An iteration run with CUPTI's unified-memory counters on, after the timed ones: counting "
                  "slows paging, so those iterations are not timed.",
}

LARGE = {"headline": "28px", "text": "22px", "small": "17px"}
NORMAL = {"headline": "18px", "text": "16px", "small": "13px"}


def type_sizes(large: bool) -> dict[str, str]:
    """The CSS font sizes of the page's text: large for a projector."""
    return LARGE if large else NORMAL


class Text(pn.pane.HTML):
    """A pane whose `object` is text, shown as it is. What the page says holds names from session files,
    file names and what people type, and Markdown or HTML panes would render them: `<img onerror=...>`
    in an op name would run, `**x**` turn bold, `$x$` become math. Here every character stays one (the
    HTML pane's math is off by default)."""

    def _transform_object(self, obj: Any) -> dict[str, Any]:
        result: dict[str, Any] = super()._transform_object(escape("" if obj is None else str(obj)))
        return result

    def _update(self, ref: str, model: Any) -> None:
        # new text is new text only: Panel's HTML pane sends every property with it, its stylesheets as
        # new models, and a new model in a served document makes Bokeh walk all of the document's models
        model.update(text=self._get_properties(model.document)["text"])


# newer Panels call a widget's `name` `label` and a button's `button_type` `color`: say it either way
_LABEL = "label" if "label" in pn.widgets.Button.param else "name"
_COLOR = "color" if "color" in pn.widgets.Button.param else "button_type"


def relabel(w: Any, label: str) -> None:
    """Set a widget's label, whichever parameter this Panel names it by (see `widget`)."""
    setattr(w, _LABEL, label)


def colored(color: str) -> dict[str, str]:
    """A button's colour, as this Panel names the parameter (for `from_param`, which `widget` cannot make)."""
    return {_COLOR: color}


def widget(cls: Any, label: str, **params: Any) -> Any:
    """A Panel widget with its label (and a button's colour) as this Panel names them."""
    if "button_type" in params:
        params[_COLOR] = params.pop("button_type")
    return cls(**{_LABEL: label}, **params)


def tip(*terms: str) -> Any:
    """A small ⓘ that says what `terms` mean (from `GLOSSARY`) when hovered."""
    return pn.widgets.TooltipIcon(value="\n".join(f"{t}: {GLOSSARY[t]}" for t in terms), margin=(8, 0, 0, 0))


def glossary() -> Any:
    """Every word of the glossary, for the sidebar."""
    rows = "".join(f"<dt><b>{escape(term)}</b></dt><dd>{escape(text)}</dd>" for term, text in GLOSSARY.items())
    return pn.Card(pn.pane.HTML(f"<dl style='margin:0'>{rows}</dl>", sizing_mode="stretch_width"),
                   title="What the words mean", collapsed=True, sizing_mode="stretch_width")

