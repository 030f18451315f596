"""``pending.drive`` runs a request handler coroutine without an event loop."""

from __future__ import annotations

import pytest

from pylog_nb.broker.server.pending import Pending, drive, run_to_end


async def _handler(first: Pending[int], second: Pending[int]) -> int:
    return await first + await second


def test_a_handler_runs_to_its_end_as_what_it_awaits_resolves() -> None:
    first, second = Pending[int](), Pending[int]()
    answers: list[int] = []
    drive(_handler(first, second), answers.append, pytest.fail)
    assert answers == []
    second.resolve(2)  # resolved before it is awaited: read at once when the handler gets there
    assert answers == []
    first.resolve(40)
    assert answers == [42]


def test_a_handler_that_waits_for_nothing_answers_at_once() -> None:
    answers: list[int] = []
    drive(_handler(Pending.of(1), Pending.of(2)), answers.append, pytest.fail)
    assert answers == [3]


def test_an_error_goes_to_fail_and_a_failed_pending_raises_in_the_handler() -> None:
    first = Pending[int]()
    failures: list[BaseException] = []
    drive(_handler(first, Pending.of(0)), pytest.fail, failures.append)
    first.fail(LookupError("gone"))
    assert [repr(f) for f in failures] == [repr(LookupError("gone"))]


def test_the_first_resolution_wins() -> None:
    pending = Pending[str]()
    seen: list[str] = []
    pending.then(lambda p: seen.append(p.result()))
    pending.resolve("first")
    pending.resolve("second")
    pending.fail(RuntimeError("late"))
    assert seen == ["first"] and pending.result() == "first"


def test_awaiting_anything_but_a_pending_is_refused() -> None:
    class Foreign:
        def __await__(self):
            yield "an asyncio future, say"

    async def strays() -> None:
        await Foreign()

    outcome = run_to_end(strays())
    with pytest.raises(TypeError, match="not a Pending"):
        outcome.result()
