"""A shared session is untrusted input: in the served page and in an exported one, nothing a session file
holds, nor its file's name, nor what a person types, ever runs; it shows as the characters it is, Markdown
and math included."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from payloads import ALL, ATTACKER, FILE_NAME, PAYLOADS, QUOTED, loadable, named_by_payloads

TIMEOUT_MS = 60_000
TYPED = [p for p in PAYLOADS if "\\" not in p]  # the error quotes what was typed with repr: no backslashes

# every text node on the page (shadow roots included) that holds `needle` and can be seen
_VISIBLE_TEXT = """(needle) => {
    const found = [];
    const visit = node => {
        if (node.nodeType === Node.TEXT_NODE) {
            const el = node.parentElement;
            if (node.data.includes(needle) && el &&
                el.checkVisibility({checkOpacity: true, checkVisibilityCSS: true})) found.push(node.data);
            return;
        }
        if (node.shadowRoot) visit(node.shadowRoot);
        for (const child of node.childNodes) visit(child);
    };
    visit(document);
    return found;
}"""

# elements a payload would have become, had it been parsed as HTML or rendered as Markdown or math
_INJECTED = """(attacker) => {
    const bad = [];
    const visit = node => {
        if (node.nodeType === Node.ELEMENT_NODE) {
            for (const a of node.attributes) {
                if (a.value.includes("__pwned") || a.value.includes(attacker) || (a.name === "src" && a.value === "x"))
                    bad.push(node.outerHTML.slice(0, 200));
            }
            const text = node.textContent || "";
            if ((node.tagName === "SCRIPT" && !node.type.includes("json") && text.includes("__pwned"))
                || (["STRONG", "B"].includes(node.tagName) && text === "bold")
                || node.tagName.startsWith("MJX-")) bad.push(node.outerHTML.slice(0, 200));
        }
        if (node.shadowRoot) visit(node.shadowRoot);
        for (const child of node.childNodes) visit(child);
    };
    visit(document);
    return bad;
}"""


class Hostile:
    """A watched page that also records dialogs and any request to the attacker's host (refused)."""

    def __init__(self, watched: Any) -> None:
        self.watched, self.page = watched, watched.page
        self.dialogs: list[str] = []
        self.to_attacker: list[str] = []
        self.page.on("dialog", self._dialog)
        self.page.context.route(f"**/*{ATTACKER}*", self._refuse)

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def _refuse(self, route: Any) -> None:
        self.to_attacker.append(route.request.url)
        route.abort()

    def shows(self, text: str) -> list[str]:
        found: list[str] = self.page.evaluate(_VISIBLE_TEXT, text)
        return found

    def wait_to_show(self, *texts: str) -> str:
        """Wait until one of `texts` shows as text; the one that does."""
        from playwright.sync_api import TimeoutError

        try:
            self.page.wait_for_function(f"(texts) => texts.some(t => ({_VISIBLE_TEXT})(t).length > 0)",
                                        arg=list(texts), timeout=TIMEOUT_MS)
        except TimeoutError:
            pytest.fail(f"none of {texts} showed as text; window.__pwned is "
                        f"{self.page.evaluate('() => window.__pwned')}, elements made of payloads: "
                        f"{self.page.evaluate(_INJECTED, ATTACKER)}")
        return next(t for t in texts if self.shows(t))

    def upload(self, which: int, name: str, data: bytes) -> None:
        """Hand the page's `which`th file input (0: open a session, 1: compare with B) a file."""
        self.page.locator("input[type=file]").nth(which).set_input_files(
            files=[{"name": name, "mimeType": "application/gzip", "buffer": data}])

    def assert_nothing_ran(self) -> None:
        self.page.wait_for_timeout(500)  # an image's onerror fires after its failed load
        assert self.page.evaluate("() => window.__pwned") is None, "a payload ran"
        assert self.page.evaluate(_INJECTED, ATTACKER) == []
        assert not self.dialogs, self.dialogs
        assert not self.to_attacker and not [u for u in self.watched.requests if ATTACKER in u]
        assert not self.watched.page_errors, self.watched.page_errors


@pytest.fixture
def hostile(watched_page: Any) -> Iterator[Hostile]:
    yield Hostile(watched_page)


def _open_app(h: Hostile, app_url: str) -> None:
    h.page.goto(app_url)
    h.page.wait_for_selector("canvas", state="attached", timeout=TIMEOUT_MS)
    h.wait_to_show("opened vgg19-b64-autovm-50pct.measured.vms")


def _compare_tab(h: Hostile) -> None:
    h.page.locator(".bk-tab", has_text="Compare").first.click()


def test_a_session_whose_every_free_string_is_markup_opens_and_shows_them_as_text(app_url: str,
                                                                                  hostile: Hostile) -> None:
    h = hostile
    _open_app(h, app_url)
    data = loadable()
    h.upload(0, FILE_NAME, data)
    h.wait_to_show(f"opened {FILE_NAME}")  # the status line
    h.wait_to_show(ALL)  # a collector's name and reason, in the note under the timeline
    h.assert_nothing_ran()
    h.page.get_by_role("button", name="Simulate", exact=True).click()
    h.wait_to_show(f"simulated autovm with {ALL}")  # the session's cost model, by its name
    _compare_tab(h)
    h.upload(1, FILE_NAME, data)
    h.wait_to_show(f"B: {FILE_NAME}")  # the comparison's note
    h.assert_nothing_ran()


def test_markup_for_op_and_tensor_names_is_refused_quoting_it_as_text(app_url: str, hostile: Hostile) -> None:
    h = hostile
    _open_app(h, app_url)
    data = named_by_payloads()
    for slot, name in ((0, FILE_NAME), (1, f"B {FILE_NAME}")):  # as the session shown, and as B of a comparison
        if slot:
            _compare_tab(h)
        h.upload(slot, name, data)
        said = h.wait_to_show(f"{name} is not a valid session: graph.tensors row 0, name: ")
        quoted = 'name: "' + QUOTED[0] + '\\"window.__pwned'  # the name it refuses, quoted as JSON quotes it
        assert any(quoted in t for t in h.shows(said)), h.shows(said)
        assert h.page.locator(".alert-danger").first.is_visible()
        h.assert_nothing_ran()


def test_markup_typed_into_the_page_shows_as_text(app_url: str, hostile: Hostile) -> None:
    h = hostile
    _open_app(h, app_url)
    box = h.page.get_by_role("textbox", name="Capacity (bytes")
    for typed in TYPED:
        box.fill(typed)
        box.press("Enter")
        h.page.get_by_role("button", name="Simulate", exact=True).click()
        h.wait_to_show(f"capacity '{typed[:20]}")  # the error quotes it (and may cut it short)
        assert h.page.locator(".alert-danger").first.is_visible()
    h.assert_nothing_ran()


def test_an_exported_page_shows_a_sessions_markup_as_text(hostile: Hostile, tmp_path: Path) -> None:
    from vmexplorer.plots.export import export_html
    from vmexplorer.session import session_from_bytes

    out = tmp_path / "session.html"
    export_html(session_from_bytes(loadable(), FILE_NAME), out)
    h = hostile
    h.page.goto(out.as_uri())
    h.wait_to_show(ALL)  # the collector's note
    h.assert_nothing_ran()
