"""What a run did or would do, as columns: the spans of ops and memory operations with the resident
bytes (`spans.py`, the Timeline both the executor and the simulator produce) and what the GPU's
collectors recorded (`collected.py`), and where an iteration's time went (`breakdown.py`)."""

from .breakdown import TimeSplit, time_split
from .collected import Collected, CollectedError, CollectorStatus
from .spans import Timeline, summarize

__all__ = ["Collected", "CollectedError", "CollectorStatus", "TimeSplit", "Timeline", "summarize", "time_split"]
