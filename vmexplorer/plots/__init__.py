"""The figures drawn beside the timeline and shared with it: the x axis and colours every figure uses
(`axis`), resident bytes by tensor kind (`memory`), what the GPU's collectors reported (`measured`),
where the time goes and the paging cliff (`story`), and the summary in words (`summary`).

`vmexplorer.timeline` draws the lanes from these; the app lays them out.
"""

from .axis import LANES, MEMOP_COLORS, PHASE_COLORS
from .measured import COLLECTOR_LABELS
from .story import BREAKDOWN_COLORS, POLICY_COLORS, breakdown_figure, sweep_figure, update_breakdown, update_sweep
from .summary import SUMMARY_ROWS, figures, summary_items, summary_table

__all__ = ["BREAKDOWN_COLORS", "COLLECTOR_LABELS", "LANES", "MEMOP_COLORS", "PHASE_COLORS", "POLICY_COLORS",
           "SUMMARY_ROWS", "breakdown_figure", "figures", "summary_items", "summary_table", "sweep_figure",
           "update_breakdown", "update_sweep"]
