"""Text from files, file names and typing reaches the page as text: never markup, Markdown or math."""

from __future__ import annotations

import dataclasses
import gzip
import html
import json
from typing import Any

import panel as pn

from vmexplorer.session import load_session
from vmexplorer.session.samples import DEFAULT_SAMPLE, SAMPLES
from vmexplorer.ui.page import Page


def gz(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


PAYLOAD = ('<img src=x onerror="window.__pwned=1"> <script>window.__pwned=1</script> '
           "[click](javascript:window.__pwned=1) **bold** $x^2$ $$y^2$$")


def inner_html(pane: Any) -> str:
    """What the browser sets as the pane's innerHTML (Panel sends it HTML-escaped once more)."""
    model = pane.get_root()
    assert model.disable_math, "math must stay off: $x$ from a file would render"
    return html.unescape(model.text)


def shows_as_text(pane: Any, text: str) -> bool:
    inner = inner_html(pane)
    return "<" not in inner and text in html.unescape(inner)


def test_a_file_name_a_cost_model_name_and_typing_show_as_text_in_every_pane() -> None:
    from vmexplorer.session import session_to_bytes

    s = load_session(SAMPLES / DEFAULT_SAMPLE)
    upload = session_to_bytes(dataclasses.replace(s, cost_model=dataclasses.replace(s.cost_model, name=PAYLOAD)))
    view = Page()
    view.files.upload.on_file(upload, PAYLOAD)
    assert view.state.message == "" and shows_as_text(view.info, f"opened {PAYLOAD}")
    view.configure.simulate.clicks += 1  # the same graph: simulated with the session's cost model, which says its name
    assert shows_as_text(view.info, f"with {PAYLOAD}")
    view.comparison.upload.on_file(upload, PAYLOAD)
    assert shows_as_text(view.comparison.note, f"B: {PAYLOAD}")
    view.configure.capacity.value = PAYLOAD
    view.configure.simulate.clicks += 1
    assert view.alert.visible and shows_as_text(view.alert, "capacity '<img src=x")  # quoted, maybe cut short
    panes = [v for part in (view, view.comparison, view.gpu, view.editor, view.configure, view.files, view.banner,
                            view.headline, view.finder) for v in vars(part).values()
             if isinstance(v, pn.pane.PaneBase) and not isinstance(v, pn.pane.Bokeh)]
    assert len(panes) >= 8 and all("<" not in inner_html(p) for p in panes)


def test_a_load_error_quoting_a_name_from_the_file_shows_it_as_text() -> None:
    doc = json.loads(gzip.decompress((SAMPLES / DEFAULT_SAMPLE).read_bytes()))
    doc["config"]["policy"] = PAYLOAD  # quoted by the error (an unknown policy), today and after
    view = Page()
    before = view.state.shown()
    view.files.upload.on_file(gz(json.dumps(doc).encode()), PAYLOAD)
    if view.state.message:  # refused: the page as it was, the file's name and the policy as text
        assert view.state.shown() == before and shows_as_text(view.alert, PAYLOAD)
        assert "<img src=x onerror=" in html.unescape(inner_html(view.alert)).split(PAYLOAD, 1)[1]
    else:  # opened: the policy named as text under the knobs
        assert shows_as_text(view.configure.policy_help, PAYLOAD)


def test_a_text_pane_sends_its_new_text_alone_escaped(monkeypatch: Any) -> None:
    # Panel's HTML pane sent its stylesheets (new models) with every new text, and each new model makes a
    # served document walk all of its models again
    from bokeh.document import Document

    from vmexplorer.ui.widgets import Text

    doc, pane = Document(), Text("before", styles={"font-size": "12px"})
    model = pane.get_root(doc)
    doc.add_root(model)
    sent: list[set[str]] = []
    update = type(model).update
    monkeypatch.setattr(type(model), "update", lambda self, **values: (sent.append(set(values)),
                                                                        update(self, **values)))
    pane.object = "<img src=x onerror=alert(1)>"
    assert sent == [{"text"}]
    assert "img src=x" in model.text and "<img" not in model.text
