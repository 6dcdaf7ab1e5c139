"""The figures of a session, as Bokeh models built once and refilled through their data sources: the
x axis, colours and type sizes every figure uses (`axis`), the timeline's lanes (`timeline`), resident
bytes by tensor kind (`memory`), what the GPU's collectors reported (`measured`), where the time goes
and the paging cliff (`story`), the summary in words (`summary`), and the page that opens offline
(`export`). The app (`vmexplorer.ui`) lays them out.
"""

from .axis import LANES, MEMOP_COLORS, PHASE_COLORS
from .measured import COLLECTOR_LABELS
from .story import BREAKDOWN_COLORS, POLICY_COLORS, breakdown_figure, sweep_figure, update_breakdown, update_sweep
from .summary import SUMMARY_ROWS, figures, summary_items, summary_table

__all__ = ["BREAKDOWN_COLORS", "COLLECTOR_LABELS", "LANES", "MEMOP_COLORS", "PHASE_COLORS", "POLICY_COLORS",
           "SUMMARY_ROWS", "breakdown_figure", "figures", "summary_items", "summary_table", "sweep_figure",
           "update_breakdown", "update_sweep"]
