"""The web app, for now a placeholder page: `panel serve vmexplorer/app.py` (no GPU needed).

It draws one session: the first file in sample_sessions/, or, when there is none (or it does not
open), a freshly simulated VGG-19 batch 64 under AutoVM at 50% of its footprint. The editor with
draggable markers, runs and comparisons comes in a later release.
"""

from __future__ import annotations

import sys
from pathlib import Path

import panel as pn

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):
    # `panel serve vmexplorer/app.py` runs this file as a script from a checkout that may not be
    # installed: make the package importable from the repository it sits in
    sys.path.insert(0, str(ROOT))

from vmexplorer.costmodel import H100_DEFAULT  # noqa: E402
from vmexplorer.models import build_graph  # noqa: E402
from vmexplorer.policies import compile_plan  # noqa: E402
from vmexplorer.session import Session, SessionError, load_session, new_session  # noqa: E402
from vmexplorer.simulator import simulate  # noqa: E402
from vmexplorer.timeline import summary_table, timeline_figure  # noqa: E402

SAMPLES = ROOT / "sample_sessions"
DEFAULT = "vgg19-b64-autovm-50pct.measured.vms"  # a real H100 run; its uvm twin sits beside it


def first_session() -> tuple[Session, str]:
    """The session to show and a line saying where it came from."""
    paths = sorted((p for p in SAMPLES.glob("*") if p.is_file() and not p.name.startswith(".")),
                   key=lambda p: (p.name != DEFAULT, p.name))
    for path in paths:
        try:
            return load_session(path), f"sample session `{path.name}`"
        except SessionError:
            continue  # a stray or damaged file must not keep the page from opening
    graph = build_graph("vgg19", 64)
    plan = compile_plan(graph, graph.footprint // 2, "autovm")
    timeline = simulate(graph, plan, H100_DEFAULT)
    return (new_session(graph, plan, timeline, H100_DEFAULT, notes=["simulated by the placeholder app"]),
            "VGG-19, batch 64, AutoVM at 50% of its footprint, simulated just now")


def page() -> pn.template.FastListTemplate:
    session, origin = first_session()
    about = pn.pane.Markdown(
        "**vmexplorer** shows how CNN training pages GPU unified memory: which tensors a policy "
        "offloads to the host and prefetches back, and what that costs.\n\n"
        "The GPU's capacity is *emulated*: a run keeps its resident bytes under the capacity you pick "
        "by evicting as the plan says, so a large GPU can stand in for a small one.\n\n"
        "This is a preview that draws one session. The full editor (drag offload and prefetch "
        "markers, simulate at once, run on a GPU, compare sessions) comes in a later release; the "
        "`vmexplorer` command line already compiles, simulates, compares and exports.")
    return pn.template.FastListTemplate(
        title="vmexplorer",
        sidebar=[about, pn.pane.Markdown(f"Showing: {origin}.")],
        main=[pn.pane.Bokeh(summary_table(session)), pn.pane.Bokeh(timeline_figure(session))],
    )


if __name__.startswith("bokeh"):  # served by `panel serve`; importing the module builds nothing
    page().servable()
