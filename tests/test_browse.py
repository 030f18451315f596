"""The message browser against a real broker process: ``browse`` (decoding, filters, paging,
bounds, one-line errors), ``MessageBrowser``'s Python side (state after paging and filtering,
the messages its page sends, ``frame``), ``%log_browse`` in a real IPython shell, and the
widget's ES module in headless Chromium with a hostile value (drawn as text, never as HTML).

Partition 0 of the module's topic holds records of every kind (text and binary keys, JSON,
plain, binary and null values, headers, a hostile value) with timestamps one minute apart;
partition 1 holds three records; partition 2 none.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pandas as pd
import pytest
from confluent_kafka import Producer
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from pylog_nb.client import browse, create_topic
from pylog_nb.client.browsing import COLUMNS, COUNT_MAX
from pylog_nb.client.config import client_config
from pylog_nb.client.io import LogClientError
from pylog_nb.widgets import MessageBrowser
from pylog_nb.widgets import browser as browser_module

FAILS_FAST_S = 10.0  # a behaviour contract on a loaded machine, not a benchmark
HOSTILE = '<img src=x onerror="window.__pwned=1">'
BASE = pd.Timestamp("2026-01-01 00:00:00")
MINUTE_MS = 60_000
FILLER = 24  # plain records after the special ones, so paging has pages
SPECIAL = [  # (key, value, headers) at offsets 0..5
    ("alice", json.dumps({"id": 1, "name": "alice"}), [("source", b"web")]),
    ("bob", "plain text", [("source", b"batch"), ("trace", b"\xff\x01")]),
    (b"\x00\x01", b"\xde\xad\xbe\xef", None),
    (None, None, None),
    ("alice", "[1, 2, 3]", None),
    ("eve", HOSTILE, [("x", HOSTILE.encode())]),
]
RECORDS = SPECIAL + [(f"k{i}", f"v{i}", None) for i in range(FILLER)]


def at_minute(index: int) -> pd.Timestamp:
    return BASE + pd.Timedelta(minutes=index)


@pytest.fixture(scope="module")
def topic(cluster) -> str:
    name = "browsed"
    create_topic(cluster.bootstrap_servers, name, partitions=3)
    producer = Producer(client_config(cluster.bootstrap_servers, acks="all"))
    for index, (key, value, headers) in enumerate(RECORDS):
        producer.produce(name, key=key, value=value, headers=headers, partition=0,
                         timestamp=int(at_minute(index).value // 1_000_000))
    for index in range(3):
        producer.produce(name, key=f"p1-{index}", value="one", partition=1)
    assert producer.flush(30) == 0
    return name


def offsets(frame: pd.DataFrame) -> list[int]:
    return list(frame.offset)


# -- browse: decoding -------------------------------------------------------------------------

def test_values_are_text_pretty_json_or_hex_and_null_stays_null(cluster, topic):
    frame = browse(cluster, topic, count=6)
    assert list(frame.columns) == COLUMNS
    assert frame.value[0] == '{\n  "id": 1,\n  "name": "alice"\n}'
    assert list(frame.value_format) == ["json", "text", "hex", None, "json", "text"]
    assert frame.value[1] == "plain text"
    assert frame.value[2] == "de ad be ef"
    assert frame.value[3] is None and frame.key[3] is None
    assert frame.value[4] == "[\n  1,\n  2,\n  3\n]"
    assert frame.value[5] == HOSTILE


def test_raw_bytes_are_kept_beside_the_decoded_text(cluster, topic):
    frame = browse(cluster, topic, count=3)
    assert list(frame.key_bytes) == [b"alice", b"bob", b"\x00\x01"]
    assert frame.value_bytes[0] == SPECIAL[0][1].encode()
    assert frame.value_bytes[2] == b"\xde\xad\xbe\xef"
    assert list(frame.key) == ["alice", "bob", "00 01"]


def test_headers_are_decoded_name_value_pairs_and_timestamps_are_the_records(cluster, topic):
    frame = browse(cluster, topic, count=6)
    assert frame.headers[0] == [("source", "web")]
    assert frame.headers[1] == [("source", "batch"), ("trace", "ff 01")]
    assert frame.headers[2] == []
    assert list(frame.timestamp) == [at_minute(i) for i in range(6)]
    assert set(frame.partition) == {0}


# -- browse: pages and bounds -------------------------------------------------------------------

def test_a_page_stops_at_count_and_says_where_the_next_one_starts(cluster, topic):
    frame = browse(cluster, topic, start=3, count=4)
    assert offsets(frame) == [3, 4, 5, 6]
    assert frame.attrs["count"] == 4
    assert (frame.attrs["start_offset"], frame.attrs["next_offset"]) == (3, 7)
    assert (frame.attrs["low_watermark"], frame.attrs["high_watermark"]) == (0, len(RECORDS))
    assert frame.attrs["partitions"] == 3 and frame.attrs["filtered"] is False
    assert offsets(browse(cluster, topic, start=frame.offset.iloc[-1], count=1)) == [6]  # numpy


def test_paging_by_next_offset_reads_every_record_once_and_ends_at_the_high_watermark(cluster,
                                                                                     topic):
    seen, start = [], 0
    while start < len(RECORDS):
        frame = browse(cluster, topic, start=start, count=7)
        seen += offsets(frame)
        start = frame.attrs["next_offset"]
    assert seen == list(range(len(RECORDS)))
    assert offsets(browse(cluster, topic, start=len(RECORDS))) == []  # the end: empty, no error


def test_latest_is_the_last_page_and_a_negative_start_counts_back_from_the_end(cluster, topic):
    end = len(RECORDS)
    assert offsets(browse(cluster, topic, start="latest", count=3)) == [end - 3, end - 2, end - 1]
    assert offsets(browse(cluster, topic, start=-2)) == [end - 2, end - 1]
    assert offsets(browse(cluster, topic, start=-1000, count=2)) == [0, 1]  # clamped to the start


def test_other_partitions_and_an_empty_one(cluster, topic):
    assert list(browse(cluster, topic, partition=1).key) == ["p1-0", "p1-1", "p1-2"]
    empty = browse(cluster.bootstrap_servers, topic, partition=2)
    assert empty.empty and list(empty.columns) == COLUMNS
    assert empty.attrs["high_watermark"] == 0


# -- browse: filters ----------------------------------------------------------------------------

def test_key_filter_matches_the_whole_key_as_text_or_bytes(cluster, topic):
    assert offsets(browse(cluster, topic, key="alice")) == [0, 4]
    assert offsets(browse(cluster, topic, key="ali")) == []
    assert offsets(browse(cluster, topic, key=b"\x00\x01")) == [2]


def test_value_filter_finds_a_substring_of_the_text_the_pretty_json_or_the_hex(cluster, topic):
    assert offsets(browse(cluster, topic, value_contains="plain")) == [1]
    assert offsets(browse(cluster, topic, value_contains='"name": "alice"')) == [0]
    assert offsets(browse(cluster, topic, value_contains="ad be")) == [2]
    assert offsets(browse(cluster, topic, value_contains=b"\xbe\xef")) == [2]


def test_header_filter_by_name_or_by_name_and_value(cluster, topic):
    assert offsets(browse(cluster, topic, header="source")) == [0, 1]
    assert offsets(browse(cluster, topic, header="source=batch")) == [1]
    assert offsets(browse(cluster, topic, header=("x", HOSTILE))) == [5]
    assert offsets(browse(cluster, topic, header="missing")) == []


def test_time_range_is_inclusive_and_since_seeks_by_timestamp(cluster, topic):
    frame = browse(cluster, topic, since=at_minute(10), until=str(at_minute(12)))
    assert offsets(frame) == [10, 11, 12]
    assert frame.attrs["start_offset"] == 10  # ListOffsets by time: nothing before was read
    since_ms = int(at_minute(28).value // 1_000_000)
    assert offsets(browse(cluster, topic, since=since_ms)) == [28, 29]
    assert offsets(browse(cluster, topic, since="2026-01-01T00:29:00+00:00")) == [29]
    assert offsets(browse(cluster, topic, since=at_minute(60))) == []


def test_filtered_pages_resume_after_the_last_scanned_record(cluster, topic):
    first = browse(cluster, topic, value_contains="v1", count=2)  # v1, v10..v19
    assert list(first.value) == ["v1", "v10"]
    second = browse(cluster, topic, value_contains="v1", count=2,
                    start=first.attrs["next_offset"])
    assert list(second.value) == ["v11", "v12"]
    assert second.attrs["scanned"] == 2


# -- browse: errors -----------------------------------------------------------------------------

@pytest.mark.parametrize(("arguments", "words"), [
    ({"topic": "no-such-topic"}, "topic no-such-topic does not exist"),
    ({"partition": 3}, "has no partition 3 (it has 3: 0 to 2)"),
    ({"partition": -1}, "has no partition -1"),
    ({"start": 31}, "offset 31 is past the end of browsed[0] (its offsets are 0 to 29"),
    ({"start": "middle"}, "start must be an offset, earliest, latest"),
    ({"count": 0}, f"count must be between 1 and {COUNT_MAX}"),
    ({"count": COUNT_MAX + 1}, "count must be between"),
    ({"since": "yesterday-ish"}, "since: 'yesterday-ish' is not a time"),
    ({"since": at_minute(5), "until": at_minute(1)}, "is after until"),
])
def test_bad_input_is_one_readable_line_within_seconds(cluster, topic, arguments, words):
    arguments = {"topic": topic, **arguments}
    started_s = time.monotonic()
    with pytest.raises(LogClientError) as caught:
        browse(cluster, arguments.pop("topic"), **arguments)
    assert time.monotonic() - started_s < FAILS_FAST_S
    assert words in str(caught.value) and "\n" not in str(caught.value)


# -- MessageBrowser: the Python side ------------------------------------------------------------

def test_widget_pages_forward_and_back_by_offset(cluster, topic):
    browser = MessageBrowser(cluster, topic, count=10)
    assert [row["offset"] for row in browser.rows] == list(range(10))
    assert browser.page["has_previous"] is False and browser.page["has_next"] is True
    browser.next_page().next_page()
    assert [row["offset"] for row in browser.rows] == list(range(20, 30))
    assert browser.page["has_next"] is False
    browser.previous_page()
    assert browser.query["offset"] == 10 and browser.rows[0]["offset"] == 10
    browser.last_page()
    assert browser.query["offset"] == 20
    browser.previous_page()  # no page before "latest" remembered: count offsets back
    assert browser.query["offset"] == 10


def test_widget_filters_and_previous_returns_to_the_same_filtered_page(cluster, topic):
    browser = MessageBrowser(cluster, topic, count=2, value_contains="v1")
    assert [row["value"] for row in browser.rows] == ["v1", "v10"]
    browser.next_page()
    assert [row["value"] for row in browser.rows] == ["v11", "v12"]
    browser.previous_page()
    assert [row["value"] for row in browser.rows] == ["v1", "v10"]
    browser.show(value_contains="", key="alice", count=10)
    assert [row["offset"] for row in browser.rows] == [0, 4]
    assert browser.query["key"] == "alice"


def test_widget_answers_the_messages_its_page_sends(cluster, topic):
    browser = MessageBrowser(cluster, topic)
    send = lambda content: browser._on_message(browser, content, [])  # noqa: E731
    send({"type": "query", "partition": "0", "offset": "5", "count": "3", "key": "",
          "value_contains": "", "header": "", "since": "", "until": ""})
    assert [row["offset"] for row in browser.rows] == [5, 6, 7]
    send({"type": "page", "to": "next"})
    assert browser.query["offset"] == 8
    send({"type": "query", "since": "2026-01-01T00:20", "until": "2026-01-01T00:21:00"})
    assert [row["offset"] for row in browser.rows] == [20, 21]
    send({"type": "query", "since": "", "until": "", "offset": "8"})
    send({"type": "query", "partition": "1", "offset": "8"})  # 8 was partition 0's offset
    assert [row["key"] for row in browser.rows] == ["p1-0", "p1-1", "p1-2"]
    assert browser.error == ""
    browser.show(since=at_minute(2), until=at_minute(3).to_pydatetime(), partition=0)
    assert browser.query["since"] == "2026-01-01 00:02:00"
    assert [row["offset"] for row in browser.rows] == [2, 3]


def test_widget_error_is_one_line_and_the_page_shown_stays(cluster, topic):
    browser = MessageBrowser(cluster, topic, count=3)
    shown = browser.rows
    browser._on_message(browser, {"type": "query", "offset": "999"}, [])
    assert browser.error.startswith("offset 999 is past the end") and "\n" not in browser.error
    assert browser.rows == shown and browser.query["offset"] == 0
    browser._on_message(browser, {"type": "query", "count": "many"}, [])
    assert browser.error == "count must be a whole number, not 'many'"
    browser.next_page()
    assert browser.error == ""
    with pytest.raises(LogClientError, match="does not exist"):
        MessageBrowser(cluster, "no-such-topic")


def test_frame_is_the_dataframe_of_what_is_shown(cluster, topic):
    browser = MessageBrowser(cluster, topic, start=2, count=3)
    frame = browser.frame
    assert offsets(frame) == [2, 3, 4] and frame.value_bytes[0] == b"\xde\xad\xbe\xef"
    frame.loc[0, "key"] = "changed"  # a copy: the widget's page is not the caller's to change
    assert browser.frame.key[0] == "00 01"
    assert browser.keep() is not None  # no IPython shell here: the frame, nothing else


def test_a_hostile_value_reaches_the_widget_state_as_plain_text(cluster, topic):
    browser = MessageBrowser(cluster, topic, key="eve")
    [row] = browser.rows
    assert row["value"] == HOSTILE and row["format"] == "text" and row["key_format"] == "text"
    assert row["headers"] == [["x", HOSTILE]]
    assert json.loads(json.dumps(browser.rows)) == browser.rows  # only JSON text goes out


# -- %log_browse in a real IPython shell --------------------------------------------------------

@pytest.fixture
def shell(cluster):
    """An IPython shell whose magics use this module's cluster (connected by address)."""
    ipython = InteractiveShell.instance()
    ipython.run_line_magic("load_ext", "pylog_nb")
    magics = ipython.magics_manager.registry["LogMagics"]
    saved = magics.cluster, magics.bootstrap
    magics.cluster, magics.bootstrap = None, cluster.bootstrap_servers
    yield ipython
    magics.cluster, magics.bootstrap = saved


def test_log_browse_returns_a_frame_with_from_count_and_filters(shell, topic):
    frame = shell.run_line_magic("log_browse", f"{topic} --from 2 -n 3 --frame")
    assert offsets(frame) == [2, 3, 4]
    assert offsets(shell.run_line_magic("log_browse", f"{topic} --from -2 --frame")) == [28, 29]
    assert offsets(shell.run_line_magic("log_browse", f"{topic} --key alice --frame")) == [0, 4]
    contains = shell.run_line_magic("log_browse", f"{topic} --contains 'plain text' --frame")
    assert offsets(contains) == [1]
    assert offsets(shell.run_line_magic("log_browse", f'{topic} --contains "v2" --frame')) == [
        8, 26, 27, 28, 29]
    assert list(shell.run_line_magic("log_browse", f"{topic} -p 1 --frame").key) == [
        "p1-0", "p1-1", "p1-2"]


def test_log_browse_returns_the_widget_whose_page_goes_into_the_namespace(shell, topic):
    shell.run_cell(f"browser = %log_browse {topic} --header source --since '2026-01-01 00:00'")
    browser = shell.user_ns["browser"]
    assert isinstance(browser, MessageBrowser)
    assert [row["offset"] for row in browser.rows] == [0, 1]
    browser._on_message(browser, {"type": "keep", "name": "picked"}, [])
    assert offsets(shell.user_ns["picked"]) == [0, 1]
    assert browser.note.startswith("picked = DataFrame of 2 records")


@pytest.mark.parametrize(("arguments", "words"), [
    ("no-such-topic", "topic no-such-topic does not exist"),
    ("{topic} -p 7", "has no partition 7"),
    ("{topic} --from 999", "offset 999 is past the end"),
    ("{topic} --from soon", "--from 'soon': an offset, earliest, latest or -N"),
    ("{topic} -n 0", "count must be between"),
])
def test_log_browse_errors_are_one_usage_error_line_within_seconds(shell, topic, arguments,
                                                                   words):
    started_s = time.monotonic()
    with pytest.raises(UsageError) as caught:
        shell.run_line_magic("log_browse", arguments.format(topic=topic))
    assert time.monotonic() - started_s < FAILS_FAST_S
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_log_browse_has_help(shell):
    doc = shell.find_line_magic("log_browse").__doc__
    for option in ("--from", "--count", "--key", "--contains", "--header", "--since", "--frame"):
        assert option in doc
    assert "%log_browse orders" in doc


# -- the ES module in headless Chromium ---------------------------------------------------------
# No JupyterLab here (tests/test_browser.py drives one): a blank page imports browser.js and
# renders it with a stand-in for anywidget's model that holds a real MessageBrowser's state and
# records what the page sends; the test hands those messages to the widget and syncs back.

CHROMIUM = Path("/usr/bin/chromium")
SYNCED = ("topic", "partitions", "query", "rows", "page", "error", "note")
HARNESS = """async ([source, state]) => {
  const listeners = {};
  window.__sent = [];
  window.__model = {
    state,
    get: (name) => window.__model.state[name],
    on: (event, handler) => { (listeners[event] ||= []).push(handler); },
    off: () => {},
    send: (message) => window.__sent.push(message),
    sync: (changed) => {
      Object.assign(window.__model.state, changed);
      for (const name of Object.keys(changed)) for (const f of listeners[`change:${name}`] || [])
        f();
    },
  };
  const url = URL.createObjectURL(new Blob([source], { type: "text/javascript" }));
  const module = await import(url);
  const el = document.createElement("div");
  document.body.append(el);
  module.default.render({ model: window.__model, el });
}"""


def synced(browser: MessageBrowser) -> dict:
    return {name: getattr(browser, name) for name in SYNCED}


@pytest.fixture
def page():
    from playwright.sync_api import sync_playwright

    assert CHROMIUM.exists(), "scripts/setup.sh installs Debian's chromium"
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        try:
            yield chromium.new_page(viewport={"width": 1200, "height": 900})
        finally:
            chromium.close()


def test_the_page_draws_a_hostile_value_as_text_and_pages_through_python(cluster, topic, page,
                                                                          tmp_path):
    browser = MessageBrowser(cluster, topic, count=6)
    here = Path(browser_module.__file__).parent
    page.set_content("<!doctype html><html><body></body></html>")
    page.add_style_tag(content=(here / "browser.css").read_text())
    source = (here / "browser.js").read_text()
    page.evaluate(HARNESS, [source, synced(browser)])
    values = page.locator(".pylog-browse-value")
    assert values.nth(5).text_content() == HOSTILE
    assert page.locator(".pylog-browse-headers").nth(5).text_content() == f"x: {HOSTILE}"
    assert page.locator(".pylog-browse img").count() == 0
    assert page.evaluate("window.__pwned") is None
    assert values.nth(2).get_attribute("title") == "hex"
    assert page.locator(".pylog-browse-key").nth(2).get_attribute("title") == "hex"
    page.screenshot(path=str(tmp_path / "message-browser.png"))
    print(f"screenshot: {tmp_path / 'message-browser.png'}")

    page.get_by_role("button", name="next ›").click()
    assert page.locator(".pylog-browse-pending").text_content() == "reading…"
    for message in page.evaluate("window.__sent.splice(0)"):
        browser._on_message(browser, message, [])
    page.evaluate("(state) => window.__model.sync(state)", synced(browser))
    assert page.locator(".pylog-browse-offset").first.text_content() == "6"
    assert page.locator(".pylog-browse-where").text_content().startswith("6 records (read 6 to 11)")

    page.get_by_label("value contains").fill("plain")
    page.get_by_role("button", name="show").click()
    [query] = page.evaluate("window.__sent.splice(0)")
    assert query["type"] == "query" and query["value_contains"] == "plain"
    browser._on_message(browser, query, [])
    page.evaluate("(state) => window.__model.sync(state)", synced(browser))
    assert values.all_text_contents() == []  # from offset 6 on, nothing says "plain"
    assert page.locator(".pylog-browse-empty").text_content() == "no records here"
