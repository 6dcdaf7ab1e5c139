"""What a policy declares to the registry: its name, a one-line summary, the function that plans its
moves, and its options (each with a type, a default, a help line, and choices or a minimum)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..graph import Graph
from ..plan import Move


@dataclass(frozen=True)
class OptionSpec:
    type: type
    default: Any
    help: str
    choices: tuple[Any, ...] = ()
    minimum: int | None = None


class PlanMoves(Protocol):
    def __call__(self, graph: Graph, capacity: int, options: Mapping[str, Any],
                 moves: Sequence[Move]) -> list[Move]:
        """The round trips the policy plans on `graph` at `capacity` bytes. `options` holds every
        declared option, checked and defaulted; `moves` are a person's moves, given only to a policy
        that takes them (empty otherwise). PlanError when the policy refuses, saying why and the fix."""
        ...


@dataclass(frozen=True)
class PolicySpec:
    name: str
    summary: str  # one line: the CLI's --policy help and the app's policy picker show it
    plan_moves: PlanMoves
    options: dict[str, OptionSpec] = field(default_factory=dict)
    takes_moves: bool = False  # whether it plans a person's moves (`--moves`, the app's edits)
