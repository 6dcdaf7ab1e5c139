"""Links: the link the page writes for what it shows reopens exactly that view in a new page, and a link
that does not fit is said once, with the page keeping what it shows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from ui_helpers import UVM_TWIN, drag_first_marker

from vmexplorer.ui.lesson import LESSON
from vmexplorer.ui.link import fields_of, parse, query
from vmexplorer.ui.page import Page
from vmexplorer.ui.story import headline


def view_of(page: Page) -> dict[str, Any]:
    """What a person sees of a view: the headline, the timeline's title and data, the pickers, the tab."""
    s = page.state
    fig = page.timeline.pane.object
    return {"headline": headline(s), "title": fig.children[0].title.text.text, "axis": page.timeline.x_axis.value,
            "iteration": page.timeline.iteration.value, "tab": s.tab, "step": s.step, "projector": s.projector,
            "moves": sorted(map(repr, s.moves)), "summary": s.session.summary, "plan": s.session.plan}


def opened_from(address: str) -> Page:
    """A new page given the link, as the browser opens it."""
    page = Page()
    page.main()
    page.open_link(parse(address))
    return page


def _edited_sample(page: Page) -> None:
    drag_first_marker(page.timeline.pane.object, "prefetch", 3)
    page.state.param.update(axis="op", iteration="2")


def _uvm_at_iteration_8(page: Page) -> None:  # the issue's link: a sample from the picker, an iteration
    page.files.sample.value = UVM_TWIN
    page.files.open.clicks += 1
    page.state.iteration = "8"


def _simulated_config_with_options(page: Page) -> None:
    page.configure.policy.value = "autovm"
    page.configure.capacity.value = "60%"
    page.configure.knob_widgets["prefetch_distance"].value = 5
    page.configure.simulate.clicks += 1


def _swap_configuration_edited(page: Page) -> None:
    g = page.state.session.graph
    capacity = str(g.min_capacity[0] + (g.footprint - g.min_capacity[0]) // 3)  # in bytes, as a person may type
    assert page.state.simulate_config("vgg19", 64, capacity, "belady", {}, "swap"), page.state.message
    drag_first_marker(page.timeline.pane.object, "offload", -1)


def _lesson_step_then_another_tab(page: Page) -> None:
    page.banner.go(4)
    page.state.tab = "Paging cliff"


def _projector(page: Page) -> None:
    page.projector.value = True
    page.state.tab = "Lesson"


VIEWS: dict[str, Callable[[Page], None]] = {
    "a sample, edited, on the op axis, iteration 2": _edited_sample,
    "a sample opened from the picker, iteration 8": _uvm_at_iteration_8,
    "a configuration simulated with its options and the sample's cost model": _simulated_config_with_options,
    "a swap configuration at a capacity in bytes, edited": _swap_configuration_edited,
    "a lesson step, then another tab": _lesson_step_then_another_tab,
    "large type, the lesson tab": _projector,
}


@pytest.mark.parametrize("make", list(VIEWS.values()), ids=list(VIEWS))
def test_every_link_the_page_writes_reopens_its_view(page: Page, make: Callable[[Page], None]) -> None:
    make(page)
    assert page.state.message == "", page.state.message
    assert page.address == query(fields_of(page.state)), "the address holds what is shown"
    again = opened_from(page.address)
    assert again.state.message == "", again.state.message
    assert view_of(again) == view_of(page)
    assert again.address == page.address


def test_the_issues_link_opens_the_sample_it_names_at_the_iteration_it_names() -> None:
    page = opened_from(f"?sample={UVM_TWIN}&edits=&iteration=8&axis=time")
    assert page.state.source.name == UVM_TWIN and page.state.session.plan.policy == "uvm"
    title = page.timeline.pane.object.children[0].title.text.text
    assert page.timeline.iteration.value == "8" and "iteration 8 of" in title


@pytest.mark.parametrize("field, value, says", [
    ("sample", "../../etc/passwd", "there is no sample session"),
    ("sample", "uploaded", "which the server does not keep"),
    ("edits", "<b>1:2</b>", "the link's edits cannot be applied"),
    ("edits", "3:999999.1", "the link's edits cannot be applied"),
    ("config", "vgg19-b64-autovm-<script>", "is not one the app writes"),
    ("config", "vgg19-b64-nopolicy-50pct", "unknown policy"),
    ("config", "vgg19-b999999-autovm-50pct", "batch 999999"),
    ("step", "9" * 50, "is not a step"),
    ("step", "99", f"steps 1 to {len(LESSON)}"),
    ("iteration", "9" * 50, "is not one of this session's"),
    ("iteration", "-1", "is not one of this session's"),
    ("axis", "sideways", "is not one of time, op"),
    ("tab", "<b>Session</b>", "is not one of Session"),
])
def test_a_link_that_does_not_fit_says_so_once_and_the_page_keeps_what_it_shows(
        field: str, value: str, says: str) -> None:
    page = Page()
    page.main()
    shown = page.state.session
    page.open_link(parse(query({field: value})))
    assert says in page.state.message and page.alert.visible
    assert page.state.session is shown
    assert parse(page.address).get(field) != value, "the link says what the page shows, not what it could not"


@pytest.mark.parametrize("field, value", [("iteration", "9" * 50), ("iteration", "-1"), ("axis", "sideways"),
                                          ("tab", "<b>Session</b>"), ("projector", "yes please")])
def test_a_view_the_page_does_not_offer_is_not_shown_and_left_out_of_the_link(field: str, value: str) -> None:
    page = Page()
    page.main()
    before = view_of(page)
    page.open_link(parse(query({field: value})))
    assert view_of(page) == before and parse(page.address).get(field) != value


def test_a_configuration_simulated_with_an_uploaded_files_model_cannot_be_reopened_and_says_so() -> None:
    page = opened_from("?config=vgg19-b64-autovm-60pct&cost=upload")
    assert "the server does not keep" in page.state.message


def test_an_address_is_read_as_text_whatever_it_looks_like_and_only_the_links_fields() -> None:
    fields = parse("?iteration=8&step=0003&sample=%5B1%2C2%5D&projector=true&nonsense=1&edits=")
    assert fields == {"iteration": "8", "step": "0003", "sample": "[1,2]", "projector": "true", "edits": ""}
    assert parse(query(fields)) == {k: v for k, v in fields.items() if v}
    assert len(parse("?edits=" + "1:2," * 10**6)["edits"]) < 200_000, "a bounded read"
