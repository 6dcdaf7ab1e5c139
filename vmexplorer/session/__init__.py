"""Stage 4, the session: config, graph, plan and what ran, as one shareable file.

`session.py` is the data and its error, `format.py` the schema (docs/session-format.md), read through
`reader.py`'s checks, `files.py` reads and writes files within bounded memory, `compare.py` lines two
sessions up and `trace.py` writes the Chrome trace.
"""

from .files import load_session, save_session, session_from_bytes, session_to_bytes
from .session import Session, SessionError, bound_for, new_session, timing_graph

__all__ = ["Session", "SessionError", "bound_for", "load_session", "new_session", "save_session",
           "session_from_bytes", "session_to_bytes", "timing_graph"]
