"""The package's imports follow the contract: no cycles, and each stage imports only earlier stages.

Every import counts, wherever it is written: at the top of a module, inside a function (a lazy import
is still a dependency, only a later one) and under `TYPE_CHECKING` (a type a module cannot name without
another is a dependency on it). The imports are read from the source, so nothing is imported to check.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "vmexplorer"

# The contract, Graph -> Plan -> (Executor | Simulator) -> Session -> Plots -> UI, as the order in which the
# top-level modules and packages may import each other: each may import only those before it. The app's
# panels (ui/) sit on top of everything but the entry points.
STAGES = (
    ("units", "fileio", "config", "plugins"),
    ("graph",),
    ("plan",),
    ("policies",),
    ("records",),
    ("simulator",),
    ("session",),
    ("details",),
    ("collectors",),
    ("engine",),
    ("plots",),
    ("worker", "pool"),
    ("ui",),
    ("app", "cli", "__main__", "api"),
)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _inside(name: str, package: str) -> bool:
    """Whether module `name` is `package`'s own code: its `__init__` is already running when `name`
    imports anything, so importing from it adds no dependency."""
    return _is_package(package) and (name == package or name.startswith(package + "."))


def imports_of(name: str, source: str | None = None) -> set[str]:
    """The vmexplorer modules that importing `name` runs, from every import statement in its source
    (or `source`, read as if it were `name`'s): the module named and, for `from X import y`, the
    submodule `X.y` where `y` is one; a package's `__init__` runs too when the importer is outside it."""
    package = name if _is_package(name) else name.rpartition(".")[0]
    found: set[str] = set()
    text = MODULES[name].read_text() if source is None else source
    for node in ast.walk(ast.parse(text)):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            targets = [source] + [f"{source}.{a.name}" for a in node.names]
        for target in targets:
            if target not in MODULES or _inside(name, target):
                continue
            found.add(target)
            parts = target.split(".")
            for k in range(2, len(parts)):  # enclosing packages the importer is not inside
                parent = ".".join(parts[:k])
                if not _inside(name, parent):
                    found.add(parent)
    found.discard(name)
    return found


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def _stage(name: str) -> int:
    top = name.split(".")[1] if "." in name else ""
    for i, members in enumerate(STAGES):
        if top in members:
            return i
    raise AssertionError(f"{name} belongs to no stage of the contract: add it to STAGES")


def test_the_reader_finds_lazy_and_type_only_imports() -> None:
    source = """
from typing import TYPE_CHECKING
from . import session
if TYPE_CHECKING:
    from ..plan.plan import Plan
def later():
    from ..engine import executor
    import vmexplorer.records.spans
"""
    assert imports_of("vmexplorer.session.files", source) == {
        "vmexplorer.session.session", "vmexplorer.plan", "vmexplorer.plan.plan", "vmexplorer.engine",
        "vmexplorer.engine.executor", "vmexplorer.records", "vmexplorer.records.spans"}


def test_the_cycle_finder_finds_a_cycle_hidden_in_a_function() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(edges) == [["a", "b", "c"]]


def test_no_module_imports_itself_through_others() -> None:
    edges = {name: imports_of(name) for name in MODULES}
    assert _cycles(edges) == []


def test_every_module_imports_only_its_own_stage_or_earlier_ones() -> None:
    wrong = []
    for name in MODULES:
        if name == "vmexplorer":
            continue
        for target in imports_of(name):
            if target != "vmexplorer" and _stage(target) > _stage(name):
                wrong.append(f"{name} imports {target}")
    assert wrong == []


def test_stages_do_not_import_each_other_both_ways() -> None:
    # within a stage of several members (units and fileio; app and cli) one may
    # use another, never both ways round
    tops: dict[str, set[str]] = {}
    for name in MODULES:
        if name == "vmexplorer":
            continue
        top = name.split(".")[1]
        tops.setdefault(top, set()).update(t.split(".")[1] for t in imports_of(name) if t != "vmexplorer")
    edges = {top: deps - {top} for top, deps in tops.items()}
    assert _cycles(edges) == []
