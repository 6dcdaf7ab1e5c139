"""Stage 3 on a CPU: predict the timeline of any plan from a cost model (`simulate.py`, `costmodel.py`)
fitted to a measured session (`calibrate.py`)."""

from .calibrate import calibrate
from .costmodel import H100_DEFAULT, CostModel
from .simulate import simulate

__all__ = ["H100_DEFAULT", "CostModel", "calibrate", "simulate"]
