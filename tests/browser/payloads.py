"""Hostile sessions for the page tests: every string a shared file (or its name) can carry is markup that
would run, or Markdown and math that would render, if the page ever treated it as anything but text."""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

from vmexplorer.records import CollectorStatus
from vmexplorer.session import load_session, session_to_bytes

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_sessions" / "vgg19-b64-autovm-50pct.measured.vms"
ATTACKER = "attacker.invalid"  # no page may ask this host for anything

# each sets window.__pwned (or asks the attacker's host) if it runs; the last three change how they look
PAYLOADS = (
    '<img src=x onerror="window.__pwned=(window.__pwned||0)+1">',
    "<script>window.__pwned=1</script>",
    "<svg onload=\"window.__pwned=1\"></svg>",
    f'<img src="http://{ATTACKER}/p.png">',
    "[click](javascript:window.__pwned=1)",
    "**bold**",
    "$x^2$ $$y^2$$ \\(z\\)",
)
ALL = " ".join(PAYLOADS)
# a file's name cannot hold "/": the same payloads, their slashes left out
FILE_NAME = " ".join(p.replace("/", "") for p in PAYLOADS) + ".vms"
# what is left of each payload when an error message quotes it (JSON escapes its quotes, cuts it short):
# any of these on the page as text shows that a quoted payload stayed text
QUOTED = ("<img src=x onerror=", "<script>window.__pwned", "<svg onload=", "[click](javascript:", "**bold**",
          "$x^2$")


def loadable() -> bytes:
    """The sample with a payload in every free string a loadable session has: its notes, its environment's
    keys and values, its cost model's name and the keys of its per-op and per-kind maps, the kernel
    names and a collector status (name and reason)."""
    s = load_session(SAMPLE)
    assert s.cost_model is not None and s.collected is not None
    cost = s.cost_model
    cost = dataclasses.replace(cost, name=ALL, op_ns={**cost.op_ns, ALL: 1000.0},
                               op_gap_ns={**cost.op_gap_ns, ALL: 10.0},
                               fault_bytes_per_ns_by_kind={**cost.fault_bytes_per_ns_by_kind, ALL: 1.0})
    c = s.collected
    collected = dataclasses.replace(c, kernel_names=tuple(ALL for _ in c.kernel_names),
                                    status=(*c.status, CollectorStatus(ALL, False, ALL, 0, 0)))
    return session_to_bytes(dataclasses.replace(
        s, notes=(*s.notes, *PAYLOADS), environment={**s.environment, ALL: ALL}, cost_model=cost,
        collected=collected))


def named_by_payloads() -> bytes:
    """The sample with payloads for its op and tensor names: a loader that holds the graph to the model's
    refuses it, quoting one; one that does not, shows them (tables, help, hover)."""
    doc = json.loads(gzip.decompress(SAMPLE.read_bytes()))
    for table in ("ops", "tensors"):
        names = doc["graph"][table]["columns"]["name"]
        doc["graph"][table]["columns"]["name"] = [f"{PAYLOADS[i % len(PAYLOADS)]} {i}" for i in range(len(names))]
    return gzip.compress(json.dumps(doc).encode(), mtime=0)
