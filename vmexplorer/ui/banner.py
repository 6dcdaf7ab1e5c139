"""The lesson on the page: a banner above the tabs while a step is on (its title, its words in large type,
Previous and Next, the arrow keys), the Lesson tab listing the steps, and the "Start the lesson" button
of the first screen. What each step opens and says is `ui.lesson`'s; this draws it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import panel as pn
import param
from panel.custom import JSComponent

from . import lesson
from .lesson import LESSON
from .state import AppState, store_param
from .widgets import Text, type_sizes, widget


def _now(method: Callable[..., Any], *args: Any) -> None:
    method(*args)


class ArrowKeys(JSComponent):
    """Left and right arrow keys, while this component is on screen and no text field has the focus:
    a lesson on a projector is stepped through from the keyboard (or a presenter's clicker, which
    sends the same keys). `pressed` counts the presses, -1 for left and +1 for right, as `last`."""

    last = param.Integer(default=0, doc="-1: left, +1: right (the last key pressed)")
    pressed = param.Integer(default=0, doc="how many arrow keys were pressed (each press changes it)")

    _esm = """
    export function render({ model, el }) {
      const box = document.createElement("span");
      const onkey = (e) => {
        const t = e.target;
        if (t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA" || t.isContentEditable)) { return; }
        if (e.key !== "ArrowLeft" && e.key !== "ArrowRight") { return; }
        if (!box.isConnected || el.offsetParent === null) { return; }  // on a hidden tab: not for us
        model.last = e.key === "ArrowRight" ? 1 : -1;
        model.pressed = model.pressed + 1;
        e.preventDefault();
      };
      document.addEventListener("keydown", onkey);
      model.on("remove", () => document.removeEventListener("keydown", onkey));
      return box;
    }
    """


class LessonBanner(pn.viewable.Viewer):
    """The banner of the step shown (`AppState.step`; 0: none, and the banner is hidden)."""

    state: AppState = store_param()
    act = param.Callable(default=_now, doc="runs a store method as the page's actions run")

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.title = Text(styles={"font-size": "1.6em", "font-weight": "bold"})
        self.words = Text(styles={"font-size": type_sizes(False)["text"]}, sizing_mode="stretch_width")
        self.previous = widget(pn.widgets.Button, "Previous", width=110)
        self.next = widget(pn.widgets.Button, "Next", button_type="primary", width=110)
        self.close = widget(pn.widgets.Button, "End the lesson", width=140)
        self.previous.on_click(lambda _: self.go(self.state.step - 1))
        self.next.on_click(lambda _: self.go(self.state.step + 1))
        self.close.on_click(lambda _: self.act(lesson.open_step, self.state, 0))
        self.keys = ArrowKeys(height=0, width=0, margin=0)
        pn.bind(self._on_key, self.keys.param.pressed, watch=True)
        self.start = widget(pn.widgets.Button, "▶ Start the lesson", button_type="success", width=190,
                            description="a guided lesson on GPU paging, in seven steps")
        self.start.on_click(lambda _: self.go(1))
        self.starts = [widget(pn.widgets.Button, f"▶ {s.title}", width=360, align="start") for s in LESSON]
        for i, button in enumerate(self.starts, start=1):
            button.on_click(lambda _, i=i: self.go(i))
        self._banner = pn.Column(pn.Row(self.previous, self.next, self.title, pn.layout.HSpacer(), self.close),
                                 self.words, self.keys, visible=False, sizing_mode="stretch_width",
                                 styles={"border-left": "6px solid #4c78a8", "padding-left": "12px"})

    def _on_key(self, _pressed: int) -> None:
        self.go(self.state.step + self.keys.last)

    def go(self, step: int) -> None:
        """Open a step, kept within the lesson (the arrow keys at either end do nothing)."""
        self.act(lesson.open_step, self.state, min(max(step, 1), len(LESSON)))

    def draw(self) -> None:
        n = self.state.step
        self._banner.visible = n > 0
        self.start.visible = n == 0
        if not n:
            return
        self.title.object = LESSON[n - 1].title
        self.words.object = lesson.words(self.state)
        self.previous.disabled, self.next.disabled = n == 1, n == len(LESSON)

    def set_large(self, large: bool) -> None:
        self.words.styles = {**self.words.styles, "font-size": type_sizes(large)["text"]}

    def contents(self) -> Any:
        """The Lesson tab: what the lesson is, and a button per step (each step also has its link, `?step=N`)."""
        return pn.Column(
            pn.pane.Markdown(f"A guided lesson on GPU paging for a class, in {len(LESSON)} steps, each on a "
                             "session measured on a GPU. A step opens its view and says what it shows; the **Next** "
                             "and **Previous** buttons, or the ← and → keys, step through it."),
            *self.starts, sizing_mode="stretch_width")

    def __panel__(self) -> Any:
        return self._banner
