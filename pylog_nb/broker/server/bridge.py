"""Between the core's ``Pending`` values and asyncio: the asyncio shell's side of ``pending.py``.

``future_of`` lets a coroutine of the shell await what the core resolves (the verification of a
partition by the local transaction coordinator, the local side of WriteTxnMarkers, a handler run
by ``pending.drive``); ``pending_of`` hands the core what only the shell can do (a call to the
controller or to another broker) as a ``Pending`` it can await in a request handler.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from .pending import Pending

T = TypeVar("T")


def future_of(pending: Pending[T]) -> asyncio.Future[T]:
    """An asyncio future resolved with the Pending (on the running loop)."""
    future: asyncio.Future[T] = asyncio.get_running_loop().create_future()

    def settle(done: Pending[T]) -> None:
        if future.done():
            return  # its awaiter was cancelled (the connection closed)
        try:
            future.set_result(done.result())
        except Exception as error:  # noqa: BLE001 - handed to the awaiter
            future.set_exception(error)

    pending.then(settle)
    return future


def pending_of(awaitable: Awaitable[T]) -> Pending[T]:
    """A Pending resolved with what ``awaitable`` gives, run as a task of the running loop."""
    pending: Pending[T] = Pending()

    def settle(task: asyncio.Future[T]) -> None:
        if task.cancelled():
            pending.fail(asyncio.CancelledError())
        elif task.exception() is not None:
            pending.fail(task.exception())  # type: ignore[arg-type]
        else:
            pending.resolve(task.result())

    asyncio.ensure_future(awaitable).add_done_callback(settle)
    return pending
