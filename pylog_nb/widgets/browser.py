"""A message browser: ``MessageBrowser(cluster, "orders")`` or ``%log_browse orders``.

Theory of operation: Python holds all the state and does all the reading; the browser
(``browser.js``, an anywidget ES module) draws the synced state and sends back what the user
asked for. Nothing runs in the background: a page is read only when asked.

- A page is one call to ``pylog_nb.client.browse`` with the widget's query (partition, start
  offset, count, filters). The DataFrame it returns is kept (``frame``, raw bytes included);
  what the browser needs of it goes out as ``rows`` (decoded text only) and ``page`` (where the
  page stands in the partition), with the query, in one sync.
- Paging is by offset. "Next" starts at the page's ``next_offset`` (one past the last record
  scanned, so a filtered page skips nothing); "previous" goes back to the start of the page
  before, remembered on a bounded stack (with filters, pages are not ``count`` offsets long),
  or ``count`` offsets back when there is none (a page opened at "latest").
- The browser sends ``{"type": "query", ...}`` (the form), ``{"type": "page", "to": "first" |
  "previous" | "next" | "last"}`` and ``{"type": "keep", "name"}`` ("as DataFrame": the frame
  of what is shown goes into the notebook's namespace under ``name``). A failure is one line
  in ``error``; the page shown before stays.
- Every key, value and header from a client reaches the page through ``textContent`` only.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anywidget
import pandas as pd
import traitlets

from ..client.browsing import COUNT_DEFAULT, browse, decode, moment
from ..client.io import LogClientError

SHOWN_CHARS_MAX = 4_000  # a value longer than this is cut in the table (the frame has it all)
BACK_PAGES_MAX = 1_000  # "previous" remembers this many page starts
KEEP_NAME_DEFAULT = "browsed"
HERE = Path(__file__).parent
QUERY_FIELDS = ("partition", "offset", "count", "key", "value_contains", "header", "since",
                "until")


class MessageBrowser(anywidget.AnyWidget):
    """Records of one partition, a page at a time, filtered; ``frame`` is what is shown."""

    _esm = HERE / "browser.js"
    _css = HERE / "browser.css"

    topic = traitlets.Unicode().tag(sync=True)
    partitions = traitlets.Int(1).tag(sync=True)  # how many the topic has
    query = traitlets.Dict().tag(sync=True)  # partition, offset, count and the filters
    # the page, as text: offset, timestamp, key, ...
    rows: traitlets.List[Any] = traitlets.List().tag(sync=True)
    page = traitlets.Dict().tag(sync=True)  # start, next, low, high, scanned, has_*
    error = traitlets.Unicode("").tag(sync=True)  # why the last request failed, or ""
    note = traitlets.Unicode("").tag(sync=True)  # what "as DataFrame" did

    def __init__(self, source, topic: str, *, partition: int = 0,
                 start: str | int = "earliest", count: int = COUNT_DEFAULT,
                 key: str = "", value_contains: str = "", header: str = "",
                 since: str = "", until: str = "") -> None:
        super().__init__()
        self.source = source
        self.topic = topic
        self._frame = pd.DataFrame()
        self._back: list[int] = []  # starts of the pages before this one
        self.on_msg(self._on_message)
        self.show(partition=partition, offset=start, count=count, key=key,
                  value_contains=value_contains, header=header, since=since, until=until)

    def __repr__(self) -> str:  # text/plain, where no widget can be drawn
        return f"MessageBrowser({self.topic!r}, {self._where()})"

    @property
    def frame(self) -> pd.DataFrame:
        """The records shown, as a DataFrame (raw ``key_bytes`` / ``value_bytes`` included)."""
        return self._frame.copy()

    # -- what Python (and the browser's form) can ask for --------------------------------------

    def show(self, **changes) -> MessageBrowser:
        """Read a page with the query changed by ``changes`` (any of ``QUERY_FIELDS``; the
        offset may be "earliest", "latest" or negative as in ``browse``); forget "previous"."""
        unknown = set(changes) - set(QUERY_FIELDS)
        assert not unknown, unknown
        query = {**self.query, **_as_text(changes)}
        self._read(query)
        self._back.clear()
        return self

    def next_page(self) -> MessageBrowser:
        """The page after this one (from one past the last record scanned)."""
        if not self.page.get("has_next"):
            return self
        start = self.page["start"]
        self._read({**self.query, "offset": self.page["next"]})
        self._back = [*self._back, start][-BACK_PAGES_MAX:]
        return self

    def previous_page(self) -> MessageBrowser:
        """The page before this one."""
        if not self.page.get("has_previous"):
            return self
        if self._back:
            self._read({**self.query, "offset": self._back[-1]})
            self._back.pop()
        else:
            start = max(self.page["low"], self.page["start"] - self.query["count"])
            self._read({**self.query, "offset": start})
        return self

    def first_page(self) -> MessageBrowser:
        return self.show(offset="earliest")

    def last_page(self) -> MessageBrowser:
        return self.show(offset="latest")

    def keep(self, name: str = KEEP_NAME_DEFAULT) -> pd.DataFrame:
        """``frame``, also put in the notebook's namespace as ``name`` (when IPython runs)."""
        if not name.isidentifier():
            raise LogClientError(f"{name!r} is not a Python name")
        frame = self.frame
        shell = _ipython()
        if shell is not None:
            shell.user_ns[name] = frame
        self.note = (f"{name} = DataFrame of {len(frame)} records ({self._where()})"
                     if shell is not None else f"browser.frame: {len(frame)} records")
        return frame

    # -- reading -------------------------------------------------------------------------------

    def _read(self, query: dict) -> None:
        """One page for ``query``; on failure ``error`` says why and the page shown stays."""
        try:
            frame = browse(self.source, self.topic, partition=int(query["partition"]),
                           start=query["offset"], count=int(query["count"]),
                           key=query["key"] or None,
                           value_contains=query["value_contains"] or None,
                           header=query["header"] or None, since=query["since"] or None,
                           until=query["until"] or None)
        except LogClientError as error:
            self.error = str(error)
            raise
        at = frame.attrs
        page = {"start": at["start_offset"], "next": at["next_offset"],
                "low": at["low_watermark"], "high": at["high_watermark"],
                "scanned": at["scanned"], "has_previous": at["start_offset"] > at["low_watermark"],
                "has_next": at["next_offset"] < at["high_watermark"]}
        self._frame = frame
        with self.hold_sync():  # one message: a page never shows another page's rows
            self.query = {**query, "offset": at["start_offset"]}
            self.rows = [_shown(row) for row in frame.itertuples(index=False)]
            self.page = page
            self.partitions = at["partitions"]
            self.error = ""
            self.note = ""

    def _where(self) -> str:
        if not self.page:
            return "no page"
        return (f"partition {self.query['partition']}, offsets {self.page['start']} to "
                f"{self.page['next'] - 1} of {self.page['low']} to {self.page['high'] - 1}")

    def _on_message(self, _widget, content, _buffers) -> None:
        try:
            self._answer(content)
        except LogClientError as error:  # the page shows it; the kernel has nothing to print
            self.error = str(error)

    def _answer(self, content: dict) -> None:
        kind = content.get("type")
        if kind == "query":
            changes = _typed_query({f: content.get(f) for f in QUERY_FIELDS if f in content})
            if (changes.get("partition", self.query["partition"]) != self.query["partition"]
                    and changes.get("offset", self.query["offset"]) == self.query["offset"]):
                changes["offset"] = "earliest"  # this offset was the other partition's
            self.show(**changes)
        elif kind == "page":
            moves: dict[str | None, Callable[[], object]] = {
                "first": self.first_page, "previous": self.previous_page,
                "next": self.next_page, "last": self.last_page}
            moves.get(content.get("to"), lambda: None)()
        elif kind == "keep":
            self.keep(str(content.get("name") or KEEP_NAME_DEFAULT))


def _as_text(changes: dict) -> dict:
    """Filters as the text the form shows (a synced trait holds JSON: no bytes, no times)."""
    text = dict(changes)
    for name in ("since", "until"):
        if text.get(name) not in (None, ""):
            text[name] = str(moment(text[name], name))
    for name in ("key", "value_contains", "header"):
        if text.get(name) is None:
            text[name] = ""
        elif not isinstance(text[name], str):
            raise LogClientError(f"{name}: the browser filters by text; "
                                 f"pylog_nb.client.browse also takes bytes")
    return text


def _typed_query(fields: dict) -> dict:
    """The browser's form as ``show`` arguments: numbers from text, empty text for no filter."""
    typed: dict[str, Any] = {name: "" if value is None else str(value).strip()
                             for name, value in fields.items()}
    for name in ("partition", "count"):
        if name in typed:
            typed[name] = _integer(typed[name], name)
    if "offset" in typed and typed["offset"] not in ("earliest", "latest"):
        typed["offset"] = _integer(typed["offset"] or "0", "offset")
    return typed


def _integer(text: str, name: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise LogClientError(f"{name} must be a whole number, not {text!r}") from None


def _shown(row) -> dict:
    """A row as the browser draws it: text only (no bytes), long values cut."""
    return {"offset": int(row.offset), "timestamp": _time_text(row.timestamp),
            "key": row.key, "key_format": decode(row.key_bytes)[1],
            "value": _cut(row.value), "format": row.value_format,
            "headers": [[name, _cut(value)] for name, value in row.headers]}


def _time_text(at) -> str:
    return "" if at is pd.NaT else at.isoformat(sep=" ", timespec="milliseconds")


def _cut(text: str | None) -> str | None:
    if text is None or len(text) <= SHOWN_CHARS_MAX:
        return text
    return f"{text[:SHOWN_CHARS_MAX]}… ({len(text) - SHOWN_CHARS_MAX} more characters)"


def _ipython():
    if "IPython" not in sys.modules:
        return None
    from IPython import get_ipython

    return get_ipython()
