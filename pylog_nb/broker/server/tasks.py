"""Background tasks a shell starts and must not lose.

asyncio keeps only a weak reference to a task, so a task nobody holds can vanish mid-flight;
and a failure nobody awaits is reported only when the task is garbage-collected, if ever. The
coordinators' shells (loading a partition, awaiting an append, sending markers or verifications)
hold theirs here: each is referenced until it ends, a failure is logged at once with its
traceback, and ``cancel_all`` stops what is left when the shell closes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any


class BackgroundTasks:
    """The running tasks of one shell (``what`` names it in the log line of a failure)."""

    def __init__(self, logger: logging.Logger, what: str) -> None:
        self.logger = logger
        self.what = what
        self._tasks: set[asyncio.Task] = set()

    def spawn(self, work: Coroutine[Any, Any, Any]) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.logger.error("%s task failed", self.what, exc_info=task.exception())

    def cancel_all(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    def __len__(self) -> int:
        return len(self._tasks)
