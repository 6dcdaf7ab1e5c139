"""The timeline of a session as Bokeh figures: op lanes, copy-stream lanes, fault bursts, resident bytes.

Every glyph kind is one ColumnDataSource of numpy columns, so a session of thousands of ops draws as
fast as one of ten; a renderer per phase or kind of transfer views its rows, so the legend hides each.
The sources are named ("ops", "memops", "offload_markers", "prefetch_markers", "ghost_markers", "faults",
"resident", ...; `timeline_source` finds one) and `update_timeline` refills them for another session, so
a person's zoom and the browser's models survive an edit. A measured session with collector records
adds what the GPU itself reported ("measured_htod", "measured_dtoh": CUPTI's migrations per op, with
fault groups and kernel time on hover; "nvml_rx", "nvml_tx": NVML's PCIe throughput), and a note
naming any collector that did not run, in their place.
"""

from .axis import LANES, MEMOP_COLORS, PHASE_COLORS
from .export import export_html, standalone_html
from .lanes import (
    can_update,
    comparison_figure,
    highlight_tensor,
    issue_after_at,
    iteration_view,
    row_at,
    timeline_figure,
    timeline_source,
    typical_iteration,
    update_timeline,
)
from .measured import COLLECTOR_LABELS
from .story import BREAKDOWN_COLORS, POLICY_COLORS, breakdown_figure, sweep_figure, update_breakdown, update_sweep
from .summary import SUMMARY_ROWS, figures, summary_items, summary_table

__all__ = ["BREAKDOWN_COLORS", "COLLECTOR_LABELS", "LANES", "MEMOP_COLORS", "PHASE_COLORS", "POLICY_COLORS",
           "SUMMARY_ROWS", "breakdown_figure", "can_update", "comparison_figure", "export_html", "figures",
           "highlight_tensor", "issue_after_at", "iteration_view", "row_at", "standalone_html", "summary_items",
           "summary_table", "sweep_figure", "timeline_figure", "timeline_source", "typical_iteration",
           "update_breakdown", "update_sweep", "update_timeline"]
