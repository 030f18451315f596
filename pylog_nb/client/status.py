"""A status line for a wait: what the notebook waits for, said while it waits.

In IPython the line is a display that is replaced (``update_display``) when the wait ends: by a
closing line such as "Spark started in 14 s", or by nothing, so a cell keeps only what is worth
keeping. A wait known to be long says so before it starts (``delay_s=0``); any other wait says
so once it has lasted ``STATUS_DELAY_S``, from a timer thread, so that a quick answer or a quick
failure leaves no line behind. Outside IPython (scripts, Spark's workers) the lines go to the
``pylog.client.status`` logger at INFO and nothing is printed. IPython is imported only when a
shell is running: the client works without it.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

STATUS_DELAY_S = 1.0  # a wait shorter than this is over before a line would help
STATUS_LOG = logging.getLogger("pylog.client.status")


class Status:
    """The line of one wait; :meth:`done` chooses what replaces it when the wait ends."""

    def __init__(self, text: str, delay_s: float) -> None:
        self.text = text
        self.started_s = time.monotonic()
        self.closing = ""  # what stays when the wait is over: nothing unless done() says
        self._lock = threading.Lock()  # the timer shows, the waiter closes: one at a time
        self._closed = False
        self._handle = None  # the display, once shown in IPython
        self._shown = False
        self._timer = threading.Timer(delay_s, self._show)
        self._timer.daemon = True
        if delay_s > 0:
            self._timer.start()
        else:
            self._show()

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started_s

    def say(self, text: str) -> None:
        """Say ``text`` instead from now on: the wait turned out to be for something else (a
        leader that moved). Shown at once if the line is already shown, else when it shows."""
        with self._lock:
            self.text = text
            if self._handle is not None and not self._closed:
                self._handle.update(_plain(text))
            elif self._shown and not self._closed:
                _display(text)  # outside IPython: logged, as the first text was

    def done(self, text: str) -> None:
        """Leave ``text`` in place of the status line when the wait ends."""
        self.closing = text

    def close(self) -> None:
        self._timer.cancel()
        with self._lock:
            self._closed = True
            if self._handle is not None:
                self._handle.update(_plain(self.closing))
            elif self.closing:
                _display(self.closing)

    def _show(self) -> None:
        with self._lock:
            if not self._closed:
                self._handle = _display(self.text)
                self._shown = True


@contextmanager
def waiting(text: str, *, delay_s: float = STATUS_DELAY_S) -> Iterator[Status]:
    """Say ``text`` ("starting Spark (about 15 s)…") while the block runs, once it has run for
    ``delay_s``. If the block fails, the line is removed: the error says what happened."""
    status = Status(text, delay_s)
    try:
        yield status
    except BaseException:
        status.closing = ""
        raise
    finally:
        status.close()


def _display(text: str):
    """A display handle showing ``text`` in IPython; else None, and the text is logged."""
    if _ipython() is None:
        STATUS_LOG.info("%s", text)
        return None
    from IPython.display import display

    return display(_plain(text), display_id=True)


def _ipython():
    if "IPython" not in sys.modules:  # no shell runs without IPython imported
        return None
    from IPython import get_ipython

    return get_ipython()


def _plain(text: str):
    """Text shown as it is (``display("x")`` would show its repr, quotes included)."""
    from IPython.display import Pretty

    return Pretty(text)
