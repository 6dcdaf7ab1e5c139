"""What a URL can make a shared server do beyond the app's own pages, bounded: the component files it
answers and the rendered pages it keeps.

Panel serves a component's files (its stylesheets, its scripts) at `/components/<module>/<class>/<attribute>/<file>`,
and its handler imports `<module>` to find them: any module on the server's path, by name, from one GET with no
session. Importing a module runs it (`unittest.__main__` parses the server's arguments and exits; `this` prints
into the log). `GuardedComponentFiles` answers only for modules the server has already imported from the
packages whose components the page shows, and imports nothing.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any

from panel.io.server import ComponentResourceHandler
from tornado.web import HTTPError

# the packages whose components draw the page: Panel's own (its templates, widgets and panes), and ours
SERVED_PACKAGES = ("panel", "vmexplorer")
COMPONENT_ROUTE = r"/components/(.*)"


def _served_module(name: str) -> bool:
    return name in sys.modules and any(name == p or name.startswith(p + ".") for p in SERVED_PACKAGES)


class GuardedComponentFiles(ComponentResourceHandler):
    """Panel's component files, for the modules already imported from `SERVED_PACKAGES` only."""

    def parse_url_path(self, path: str) -> str:
        if not _served_module(path.split("/", 1)[0]):
            raise HTTPError(404, "no such component")
        try:
            return str(super().parse_url_path(path))
        except HTTPError:
            raise
        except Exception:  # a malformed path Panel's handler did not expect: not found, not a traceback
            raise HTTPError(404, "no such component") from None

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        # the status and its reason only: never the traceback or the path asked for
        self.finish(f"{status_code}: {self._reason}")


THEMES = ("default", "dark")  # the templates' themes: what ?theme= can choose


def session_key(request: Any) -> tuple[str, str]:
    """Which rendered page a request reuses (Panel's `reuse_sessions`): one per path and theme. Panel's
    own key takes ?theme= as it comes, and keeps a whole session for each value a visitor types, never
    freed: fifty GETs, fifty sessions. Any theme that is not one is the default's."""
    theme = request.arguments.get("theme", [b"default"])[0].decode("utf-8", "replace")
    return str(request.path), theme if theme in THEMES else "default"


GUARDED = "VMEXPLORER_GUARDED_ROUTES"  # set by `vmexplorer serve` for the processes it serves from


def guarded_patterns() -> list[tuple[str, type, dict[str, Any]]]:
    """Routes to put before Panel's own (tornado takes the first that matches)."""
    os.environ[GUARDED] = "1"
    return [(COMPONENT_ROUTE, GuardedComponentFiles, {})]


@functools.lru_cache(maxsize=1)
def warn_if_unguarded() -> bool:
    """Say once per server process, where the app is served without these routes (`panel serve
    vmexplorer/app.py`), that any visitor can make the server import a module; True if it said so."""
    if os.environ.get(GUARDED) == "1":
        return False
    print("vmexplorer: served by `panel serve`, whose /components/ route imports any module a URL names "
          "(one GET can stop the server): serve a class with `vmexplorer serve`, which answers that route "
          "for the page's own modules only", file=sys.stderr, flush=True)
    return True
