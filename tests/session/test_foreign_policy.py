"""A session made by a policy this vmexplorer does not have (a newer one's, or a plugin's not installed
here) opens as a `manual` plan of the same moves, with a note naming the policy that made it; the rest of
the file is held to the same checks as any other."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from vmexplorer.cli import main
from vmexplorer.graph import build_graph
from vmexplorer.policies import compile_plan
from vmexplorer.session import Session, SessionError, load_session, new_session, save_session, session_to_bytes
from vmexplorer.simulator import H100_DEFAULT, simulate


def made(policy: str = "belady", mechanism: str = "uvm") -> Session:
    graph = build_graph("resnet18", 8, 64)
    plan = compile_plan(graph, graph.footprint // 2, policy, mechanism=mechanism)
    return new_session(graph, plan, simulate(graph, plan, H100_DEFAULT), H100_DEFAULT, notes=("a note",))


def relabelled(session: Session, path: Path, policy: object, options: object) -> Path:
    doc = json.loads(gzip.decompress(session_to_bytes(session)))
    doc["config"]["policy"], doc["config"]["options"] = policy, options
    path.write_bytes(gzip.compress(json.dumps(doc).encode(), mtime=0))
    return path


@pytest.mark.parametrize("mechanism", ["uvm", "swap"])
def test_it_opens_as_a_manual_plan_of_the_same_moves_with_a_note(tmp_path: Path, mechanism: str) -> None:
    original = made(mechanism=mechanism)
    s = load_session(relabelled(original, tmp_path / "lru.vms", "lru", {"speed": 11, "mode": "fast"}))
    assert (s.plan.policy, s.plan.options, s.plan.mechanism) == ("manual", {}, original.plan.mechanism)
    assert s.plan.memops == original.plan.memops and s.plan.moves == original.plan.moves
    assert s.notes[:-1] == ("a note",)
    assert s.notes[-1].startswith("made by the policy 'lru' (options: speed \"11\", mode \"fast\"), which this "
                                  "vmexplorer does not have")
    assert "opened as a manual plan of the same moves" in s.notes[-1]
    # saved again it is a manual plan, and says once who made it
    save_session(s, tmp_path / "again.vms")
    again = load_session(tmp_path / "again.vms")
    assert again.plan == s.plan and again.notes == s.notes


def test_info_shows_it_and_names_the_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = relabelled(made(), tmp_path / "future.vms", "belady_v2", {})
    assert main(["info", str(path), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["config"]["policy"] == "manual" and "the policy 'belady_v2' (options: none)" in doc["notes"][-1]


@pytest.mark.parametrize("policy, options, says", [
    (7, {}, "config.policy should be"),
    ("lru", [1, 2], "config.options"),
])
def test_a_malformed_config_is_still_refused(tmp_path: Path, policy: object, options: object, says: str) -> None:
    with pytest.raises(SessionError, match=says):
        load_session(relabelled(made(), tmp_path / "bad.vms", policy, options))


def test_a_policy_name_from_the_file_is_shown_as_text(tmp_path: Path) -> None:
    s = load_session(relabelled(made(), tmp_path / "odd.vms", "\x1b]0;owned\x07<b>x</b>", {}))
    assert "\x1b" not in s.notes[-1] and "\x07" not in s.notes[-1]
