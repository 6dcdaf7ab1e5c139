"""How bytes move between host and device, one object per mechanism: `uvm.py` (managed memory through
the driver) and `swap.py` (a device pool and pinned copies). A plan names its mechanism
(`Config.mechanism`); the replay, the validator, the simulator, calibration and the engine's schedule
ask `mechanism_of` for its object and do what it says, so a new way of making room lands here and in
the stages' questions, not in branches across them.

`MECHANISMS` is the registry, one line per mechanism: the command line's `--mechanism` choices and the
session loader read it.
"""

from __future__ import annotations

from ...config import Config, Mechanism
from ..plan import Plan
from . import swap, uvm
from .spec import MechanismSpec

MECHANISMS: dict[Mechanism, MechanismSpec] = {spec.name: spec for spec in (
    uvm.SPEC,
    swap.SPEC,
)}


def mechanism_of(what: Mechanism | str | Plan | Config) -> MechanismSpec:
    """The object of a mechanism, given its name or anything that names one (a plan, a config)."""
    return MECHANISMS[Mechanism(what if isinstance(what, str) else what.mechanism)]


def managed(plan: Plan) -> bool:
    """Whether a run of `plan` holds its tensors in managed memory: a policy that pages, through a
    mechanism that pages managed memory (`device` allocates plain device memory, as a pool does)."""
    return plan.policy != "device" and mechanism_of(plan).managed


__all__ = ["MECHANISMS", "MechanismSpec", "managed", "mechanism_of"]
