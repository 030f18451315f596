"""What a request handler waits for, without an event loop: ``Pending`` and ``drive``.

Theory of operation. Kafka's ``KafkaApis`` hands each request a callback that a purgatory or a
coordinator calls later; this broker writes the same handlers as coroutines instead, so each reads
top to bottom, but a handler of the core never awaits anything of asyncio: only ``Pending``
values that the core resolves (an acks=all wait, a coordinator's answer, markers written, data
arriving for a Fetch, a timer the shell runs). ``drive`` steps such a coroutine by hand: each
``Pending`` it awaits gets a callback that resumes it, and its return value (or exception) goes to
the caller's ``respond`` (or ``fail``). The asyncio shell drives a handler and awaits a future
that ``respond`` completes; the seeded simulation drives the very same handler and posts the
response as a message. Nothing here reads a clock or touches a socket.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Generator
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Pending(Generic[T]):
    """A value the core will have later; awaitable from a driven handler, once."""

    __slots__ = ("_callbacks", "_done", "_error", "_value")

    def __init__(self) -> None:
        self._done = False
        self._value: Any = None
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[Pending[T]], None]] = []

    @classmethod
    def of(cls, value: T) -> Pending[T]:
        """A value known already."""
        pending: Pending[T] = cls()
        pending.resolve(value)
        return pending

    @property
    def done(self) -> bool:
        return self._done

    def result(self) -> T:
        assert self._done, "a Pending is read only once resolved"
        if self._error is not None:
            raise self._error
        return self._value

    def resolve(self, value: T) -> None:
        """Set the value (a second resolve is ignored: the first answer wins)."""
        self._settle(value, None)

    def fail(self, error: BaseException) -> None:
        """Set an error: the awaiting handler sees it raised."""
        self._settle(None, error)

    def then(self, callback: Callable[[Pending[T]], None]) -> None:
        """Call ``callback(self)`` once resolved (now, if it is)."""
        if self._done:
            callback(self)
        else:
            self._callbacks.append(callback)

    def _settle(self, value: Any, error: BaseException | None) -> None:
        if self._done:
            return
        self._done, self._value, self._error = True, value, error
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(self)

    def __await__(self) -> Generator[Pending[T], None, T]:
        if not self._done:
            yield self
        return self.result()


Respond = Callable[[Any], None]
Fail = Callable[[BaseException], None]


def drive(coroutine: Coroutine[Pending[Any], None, T], respond: Callable[[T], None],
          fail: Fail) -> None:
    """Run a handler coroutine to its end: ``respond(result)`` or ``fail(error)``, now or once
    the last ``Pending`` it awaits is resolved."""

    def step(_resolved: Pending[Any] | None) -> None:
        try:
            awaited = coroutine.send(None)
        except StopIteration as stop:
            result = stop.value
        except Exception as error:  # noqa: BLE001 - the caller answers or logs it
            fail(error)
            return
        else:
            if isinstance(awaited, Pending):
                awaited.then(step)
            else:  # an asyncio future, say: nothing here would ever resume it
                coroutine.close()
                fail(TypeError(f"a core handler awaited {awaited!r}, not a Pending"))
            return
        respond(result)

    step(None)


def run_to_end(coroutine: Coroutine[Pending[Any], None, T]) -> Pending[T]:
    """The coroutine driven, as a Pending of its result."""
    outcome: Pending[T] = Pending()
    drive(coroutine, outcome.resolve, outcome.fail)
    return outcome
