"""One recorded iteration of a session as a session of its own, so a long measured session can be drawn,
inspected and compared an iteration at a time."""

from __future__ import annotations

from dataclasses import replace

from ..records.collected import CollectorStatus
from ..records.collected import one_iteration as collected_iteration
from ..records.spans import one_iteration
from .session import Session


def iteration_view(session: Session, iteration: int) -> Session:
    """Recorded iteration `iteration` (from 0) as a session of its own: iteration 0, times from its start."""
    timeline, origin, end = one_iteration(session.timeline, iteration)
    collected = None if session.collected is None else collected_iteration(session.collected, iteration, origin, end)
    tl = session.timeline
    if collected is not None and tl.counted and iteration < tl.timed_iterations and collected.available("um"):
        # a timed iteration ran without the unified-memory counters: its lane would read as no migration
        first, last = tl.timed_iterations + 1, tl.iterations
        which = f"iteration {first}" if first == last else f"iterations {first} to {last}"
        why = (f"CUPTI counted unified memory in {which} only, after the timed ones, because counting slows "
               f"paging: choose {which} to see its migrations and faults per op")
        collected = replace(collected, status=(*collected.status, CollectorStatus("cupti_um", False, why, 0, 0)))
    return replace(session, timeline=timeline, collected=collected)


def typical_iteration(session: Session) -> Session:
    """The session's typical (median) iteration as a session of its own, or the session itself when it
    holds one iteration."""
    tl = session.timeline
    return iteration_view(session, tl.typical_iteration()) if tl.iterations > 1 else session
