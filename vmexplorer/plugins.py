"""Policies and models from other packages, through entry points: the registries' second source.

A package declares, in its pyproject.toml,

    [project.entry-points."vmexplorer.policies"]
    offload_weights = "my_package.policy:SPEC"       # a PolicySpec, or an object with one as .SPEC

    [project.entry-points."vmexplorer.models"]
    tinynet = "my_package.models:tinynet"            # (batch, image_size) -> Graph

and once it is installed, `vmexplorer plan --help`, the app's pickers and `sweep` list its policies and
models beside the built-in ones. The registries (`policies.POLICIES`, `graph.MODELS`) are `Registry`s: the
built-in entries, and the plugins', loaded on first use (not at import: `vmexplorer models` need not scan
the installed packages unless it lists models, and then once). A plugin that cannot be imported, or that
gives something else than declared, is one warning line on stderr naming it, and is skipped; so is one whose
name is a built-in's. Nothing a plugin does at loading ends the command line or the app.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

V = TypeVar("V")
POLICY_GROUP, MODEL_GROUP = "vmexplorer.policies", "vmexplorer.models"

warnings_given: list[str] = []  # every warning a registry gave, in order (the app and the tests read them)


def warn(message: str) -> None:
    """One warning line on stderr, and kept in `warnings_given`."""
    line = " ".join(message.split())
    warnings_given.append(line)
    try:
        if sys.stderr is not None:
            sys.stderr.write(f"vmexplorer: warning: {line}\n")
    except (OSError, ValueError):  # a closed stderr: the warning is kept, not a second error
        pass


def loaded(group: str) -> Iterator[tuple[str, str, Any]]:
    """Each entry point of `group` in the installed packages, loaded: (its name, where it comes from, the
    object); one that fails to load is warned of and skipped."""
    from importlib.metadata import entry_points

    try:
        found = list(entry_points(group=group))
    except Exception as e:  # a broken distribution's metadata: none of the group can be read
        warn(f"the {group} plugins could not be listed: {type(e).__name__}: {e}; none are loaded")
        return
    for ep in sorted(found, key=lambda ep: ep.name):
        where = f"{ep.value}" + (f" in {ep.dist.name}" if ep.dist is not None else "")
        try:
            value = ep.load()
        except Exception as e:  # an import error, a missing attribute, a plugin's own bug
            warn(f"the {group} plugin {ep.name!r} ({where}) could not be loaded, so it is skipped: "
                 f"{type(e).__name__}: {e}")
            continue
        yield ep.name, where, value


class Registry(dict[str, V]):
    """The built-in entries, then the plugins of entry point group `group` in the order of their names,
    each made an entry by `accept(name, where, loaded)` (a (name, value), or None to skip it, having
    warned); loaded when the registry is first read. `reload()` forgets the plugins and reads them again
    when next asked (a test that installs one)."""

    def __init__(self, builtins: dict[str, V], group: str,
                 accept: Callable[[str, str, Any], tuple[str, V] | None]) -> None:
        super().__init__(builtins)
        self.builtins, self.group, self.accept = tuple(builtins), group, accept
        self._loaded = False

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        for ep_name, where, value in loaded(self.group):
            entry = self.accept(ep_name, where, value)
            if entry is None:
                continue
            name, item = entry
            if name in self.builtins or dict.__contains__(self, name):
                which = "a built-in one" if name in self.builtins else "another plugin's"
                warn(f"the {self.group} plugin {name!r} ({where}) has the name of {which}, so it is skipped: "
                     "rename it")
                continue
            dict.__setitem__(self, name, item)

    def reload(self) -> None:
        for name in [n for n in dict.keys(self) if n not in self.builtins]:
            dict.__delitem__(self, name)
        self._loaded = False

    @property
    def plugins(self) -> list[str]:
        """The names that came from other packages."""
        self._load()
        return [n for n in dict.keys(self) if n not in self.builtins]

    # every read loads the plugins first
    def __getitem__(self, key: str) -> V:
        self._load()
        return dict.__getitem__(self, key)

    def __contains__(self, key: object) -> bool:
        self._load()
        return dict.__contains__(self, key)

    def __iter__(self) -> Iterator[str]:
        self._load()
        return dict.__iter__(self)

    def __len__(self) -> int:
        self._load()
        return dict.__len__(self)

    def get(self, key: str, default: Any = None) -> Any:
        self._load()
        return dict.get(self, key, default)

    def keys(self) -> Any:
        self._load()
        return dict.keys(self)

    def values(self) -> Any:
        self._load()
        return dict.values(self)

    def items(self) -> Any:
        self._load()
        return dict.items(self)

    def __repr__(self) -> str:
        self._load()
        return dict.__repr__(self)
