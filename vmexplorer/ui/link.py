"""What a link to the page holds, so that opening it shows the same view: where the session came from (a
sample; or a configuration, its options and the sample whose cost model simulated it), the plan's edits,
the iteration, the axis, the tab, the lesson step and the projector's type.

`fields_of` writes the fields from the store and `query` spells them as the address's query (the page
keeps the browser's address in step, `ui.serving`); `parse` reads an address's query back, every value as
text (a bounded read, with none of the number and JSON guessing Panel's own URL sync does: `?iteration=8`
stays "8"), and `apply` opens what a link names. Every value is untrusted (anyone can type a URL): a
sample must be one of the samples, a configuration must parse and plan, edits are parsed and checked,
the rest is picked from what the page offers; what does not fit is said once and left out.
"""

from __future__ import annotations

import re
import urllib.parse
from typing import Any

from ..config import capacity_text
from ..policies import POLICIES
from ..session.samples import is_sample, read_sample
from ..simulator import H100_DEFAULT
from ..units import quoted
from . import lesson
from .state import ALL_ITERATIONS, AXES, TABS, AppState

FIELDS = ("sample", "config", "options", "cost", "edits", "iteration", "axis", "tab", "step", "projector")
UPLOADED = "uploaded"  # a session that came from a file or a GPU run: the server does not keep it
_CONFIG = re.compile(r"(?P<model>[a-z0-9]{1,20})-b(?P<batch>\d{1,6})-(?P<policy>[a-z_]{1,20})(?:-(?P<mech>swap))?-"
                     r"(?:(?P<pct>\d{1,4})pct|(?P<bytes>\d{1,16})B)")
_MAX_FIELD = 20_000  # characters of one field that are read (edits are the longest)
_MAX_QUERY = 8 * _MAX_FIELD  # characters of an address's query that are read


def parse(search: str) -> dict[str, str]:
    """The link's fields in an address's query (`?sample=...&axis=op`), as text; other names are left out."""
    pairs = urllib.parse.parse_qsl(search[:_MAX_QUERY].removeprefix("?"), keep_blank_values=True)
    return {name: value for name, value in pairs if name in FIELDS}


def query(fields: dict[str, str]) -> str:
    """The address's query of a link's fields, the empty ones left out."""
    return "?" + urllib.parse.urlencode({name: fields[name] for name in FIELDS if fields.get(name)})


def fields_of(state: AppState) -> dict[str, str]:
    """The link of what the store shows."""
    s, source = state.session, state.source
    out = dict.fromkeys(FIELDS, "")
    if s is None or source is None:
        return out
    if source.kind == "sample":
        out["sample"] = source.name
    elif source.kind == "config" and source.config is not None:
        c = source.config
        capacity = capacity_text(c.capacity, s.graph.footprint)
        capacity = capacity.replace("%", "pct") if capacity.endswith("%") else f"{capacity}B"
        through = "-swap" if c.mechanism.value == "swap" else ""
        out.update(config=f"{c.model}-b{c.batch}-{c.policy}{through}-{capacity}", cost=source.cost,
                   options=",".join(f"{k}:{v}" for k, v in c.options.items()
                                    if k in POLICIES[c.policy].options and POLICIES[c.policy].options[k].default != v))
    else:
        out["sample"] = UPLOADED
    it = state.shown_iteration()
    out.update(edits=state.edits_text(), iteration="" if s.timeline.iterations <= 1 else
               (ALL_ITERATIONS if it is None else str(it + 1)), axis=state.axis, tab=state.tab,
               step=str(state.step) if state.step else "", projector="1" if state.projector else "")
    return out


def apply(state: AppState, fields: dict[str, str]) -> None:
    """Show what a link names; each field that does not fit is said (the last problem stays in
    `message`) and the rest still applies."""
    f = {k: str(fields.get(k) or "")[:_MAX_FIELD] for k in FIELDS}
    state.projector = f["projector"] in ("1", "true")
    step = _number(f["step"])
    if f["step"] and step is None:
        state.fail(f"the link's lesson step {quoted(f['step'][:20])} is not a step: the lesson has steps 1 to "
                   f"{len(lesson.LESSON)}")
    opened = lesson.open_step(state, step) if step else _open(state, f)
    if opened and f["edits"] != state.edits_text():
        state.apply_edits(f["edits"])
    _view(state, f)


def _open(state: AppState, f: dict[str, str]) -> bool:
    """Open the link's sample or configuration (True: nothing to open, or opened)."""
    if f["sample"] == UPLOADED:
        return state.fail("this link was made from a session file or a GPU run, which the server does not keep: "
                          "open the file again (Save session keeps it)")
    if f["sample"]:
        same = state.source is not None and state.source.kind == "sample" and state.source.name == f["sample"]
        return True if same and not state.edited else state.open_sample(f["sample"])
    if f["config"]:
        return _simulate(state, f)
    return True


def _simulate(state: AppState, f: dict[str, str]) -> bool:
    m = _CONFIG.fullmatch(f["config"])
    if m is None:
        return state.fail(f"the link's configuration {quoted(f['config'][:80])} is not one the app writes "
                          "(like vgg19-b64-autovm-50pct)")
    if f["cost"] == "upload":
        return state.fail("this link's configuration was simulated with the cost model of a session file the "
                          "server does not keep: open the file again, then simulate")
    if f["cost"] and not is_sample(f["cost"]):
        return state.fail(f"the link's cost model comes from {quoted(f['cost'][:80])}, which is not a sample session")
    policy = m["policy"]
    options = _options(policy, f["options"])
    if options is None:
        return state.fail(f"the link's options {quoted(f['options'][:80])} are not options of {policy}")
    cost = None
    if f["cost"]:
        model = read_sample(f["cost"]).cost_model
        cost = (f["cost"], model) if model is not None else None
    capacity = f"{m['pct']}%" if m["pct"] else m["bytes"]
    return state.simulate_config(m["model"], int(m["batch"]), capacity, policy, options, m["mech"] or "uvm",
                                 cost=cost if f["cost"] else ("", H100_DEFAULT))


def _options(policy: str, text: str) -> dict[str, Any] | None:
    spec = POLICIES.get(policy)
    if spec is None:
        return {}  # planning says the policy is unknown
    out: dict[str, Any] = {}
    for item in filter(None, text.split(",")):
        name, _, value = item.partition(":")
        opt = spec.options.get(name)
        if opt is None:
            return None
        out[name] = value in ("true", "1") if opt.type is bool else value
    return out


def _view(state: AppState, f: dict[str, str]) -> None:
    """The iteration, axis and tab a link names, where the page offers them; another is said."""
    s = state.session
    if f["iteration"] and s is not None:
        n = _number(f["iteration"])
        if f["iteration"] == ALL_ITERATIONS or (n is not None and n <= s.timeline.iterations):
            state.iteration = f["iteration"]
        else:
            state.fail(f"the link's iteration {quoted(f['iteration'][:20])} is not one of this session's: 1 to "
                       f"{s.timeline.iterations}, or {ALL_ITERATIONS}")
    for name, known in (("axis", AXES), ("tab", TABS)):
        if f[name] in known:
            setattr(state, name, f[name])
        elif f[name]:
            state.fail(f"the link's {name} {quoted(f[name][:20])} is not one of {', '.join(known)}")


def _number(text: str) -> int | None:
    """A whole number from 1 up to a lesson's or a session's size: short digits only, never a 50-digit one."""
    return int(text) if text.isdigit() and len(text) <= 4 and int(text) >= 1 else None
