"""A file input that sends its file in pieces, and refuses in the browser a file larger than the page takes.

Panel's FileInput sends the whole file in one websocket message (base64 in JSON): a file larger than the
server's message limit dropped the connection and the page stopped answering, with no message. Here the
browser reads the file in pieces of `chunk_bytes` and sends each as a message of its own, its bytes as
Bokeh's binary buffer (no base64 to make, send and decode); a file over `max_bytes` is not read at all,
and the page says so. The server puts the pieces together in order,
refusing anything out of order or over the limit, and hands the whole file to `on_file`; a refusal goes
to `on_refused`, in words. Nothing of a file stays in the widget once handed over.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import param
from panel.custom import JSComponent

from ..session.files import MAX_FILE_BYTES
from ..units import format_bytes, quoted

CHUNK_BYTES = 4 * 2**20
MAX_NAME = 1024  # characters of a file's name kept: it is shown, quoted, and names nothing on the server
# a piece's message (its bytes and its fields; base64, where a browser sends them so): the largest the
# server need take from a page
UPLOAD_MESSAGE_BYTES = -(-CHUNK_BYTES * 4 // 3) + 2**20


class FileUpload(JSComponent):
    accept = param.String(default=".vms,.gz", doc="the file types the browser's picker offers")
    max_bytes = param.Integer(default=MAX_FILE_BYTES, doc="the largest file taken; the browser refuses larger")
    chunk_bytes = param.Integer(default=CHUNK_BYTES, doc="the bytes of file in each message")

    _esm = """
    export function render({ model }) {
      const input = document.createElement("input");
      input.type = "file";
      input.accept = model.accept;
      input.addEventListener("change", async () => {
        const file = input.files[0];
        input.value = "";  // the same file picked again is a new upload
        if (!file) return;
        if (file.size > model.max_bytes) {
          model.send_msg({kind: "refused", name: file.name, size: file.size});
          return;
        }
        const count = Math.max(1, Math.ceil(file.size / model.chunk_bytes));
        try {
          for (let index = 0; index < count; index++) {
            const data = await file.slice(index * model.chunk_bytes, (index + 1) * model.chunk_bytes).arrayBuffer();
            model.send_msg({kind: "part", name: file.name, size: file.size, index, count, data});
          }
        } catch (e) {
          model.send_msg({kind: "unreadable", name: file.name, size: file.size});
        }
      });
      return input;
    }
    """

    def __init__(self, on_file: Callable[[bytes, str], Any], on_refused: Callable[[str], Any],
                 **params: Any) -> None:
        super().__init__(**params)
        self.on_file, self.on_refused = on_file, on_refused
        self._parts: list[bytes] = []
        self._got = 0  # bytes of the file under way

    def _handle_msg(self, msg: Any) -> None:
        if not isinstance(msg, dict):
            return
        name = str(msg.get("name", ""))[:MAX_NAME] or "the file"
        size = msg.get("size")
        kind = msg.get("kind")
        if kind == "refused":
            self._refuse(f"{quoted(name)} is {_size(size)}: the largest file the page takes is "
                         f"{format_bytes(self.max_bytes)}")
        elif kind == "unreadable":
            self._refuse(f"the browser could not read {quoted(name)}")
        elif kind == "part":
            self._part(msg, name, size)

    def _part(self, msg: dict[str, Any], name: str, size: Any) -> None:
        index, count = msg.get("index"), msg.get("count")
        if index == 0:
            self._parts, self._got = [], 0
        in_order = (isinstance(index, int) and isinstance(count, int) and isinstance(size, int)
                    and index == len(self._parts) and 0 <= index < count and 0 <= size <= self.max_bytes)
        data = msg.get("data")
        piece = bytes(data) if in_order and isinstance(data, bytes | memoryview) else b""
        if not in_order or not isinstance(data, bytes | memoryview) or self._got + len(piece) > size:
            self._refuse(f"{quoted(name)} did not arrive whole: try again")
            return
        self._parts.append(piece)
        self._got += len(piece)
        if index == msg["count"] - 1:  # the last piece
            data, self._parts, self._got = b"".join(self._parts), [], 0
            if len(data) != size:
                self._refuse(f"{quoted(name)} did not arrive whole: try again")
                return
            self.on_file(data, name)

    def _refuse(self, why: str) -> None:
        self._parts, self._got = [], 0
        self.on_refused(why)


def _size(size: Any) -> str:
    return format_bytes(size) if isinstance(size, int) and size >= 0 else "too large"
