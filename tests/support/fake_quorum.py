"""Small controller RPC servers on loopback for testing the client side of a quorum.

Each ``FakeController`` is a real asyncio socket server speaking the RPC frame format. It records
the methods it was called with and answers through ``respond`` (set per test), by default: when
``active``, the ``answers`` given for the method (or {}); otherwise NOT_CONTROLLER naming
``leader_id``, as a controller of a quorum that is not the active one answers. An answer may be
a coroutine (a long poll that waits). The fakes stand in
for the controller's side of the contract, which is tested against the real controller elsewhere.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

from pylog_nb.broker.controller.rpc import encode_frame, parse_frame, read_frame
from pylog_nb.broker.errors import Errors

Reply = tuple[int, str, Any]  # error code, message, result


class FakeController:
    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.active = False
        self.leader_id: int | None = None  # named in NOT_CONTROLLER when not active
        self.outcome_unknown = False  # NOT_CONTROLLER after accepting a write
        self.silent = False  # read requests, never answer (a paused controller)
        self.answers: dict[str, Callable[[dict[str, Any]], Any]] = {}
        self.calls: list[str] = []  # methods received, in order
        self.port = 0
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task] = set()

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    async def start(self, port: int = 0) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stop listening and drop every connection (a killed controller)."""
        assert self._server is not None
        self._server.close()
        for handler in list(self._handlers):
            handler.cancel()
        await asyncio.gather(*self._handlers)
        await self._server.wait_closed()
        self._server = None

    def not_controller(self, leader_id: int | None, *, outcome_unknown: bool = False) -> None:
        self.active, self.leader_id, self.outcome_unknown = False, leader_id, outcome_unknown

    def respond(self, method: str, params: dict[str, Any]) -> Reply:
        if method == "describe":
            role = "leader" if self.active else "follower"
            leader = self.node_id if self.active else self.leader_id
            return 0, "", {"node_id": self.node_id,
                           "quorum": {"node_id": self.node_id, "role": role, "leader_id": leader}}
        if not self.active:
            return (Errors.NOT_CONTROLLER,
                    f"controller {self.node_id} is not active (the active one is {self.leader_id})",
                    {"leader_id": self.leader_id, "outcome_unknown": self.outcome_unknown})
        answer = self.answers.get(method)
        return 0, "", {"node_id": self.node_id} if answer is None else answer(params)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handler = asyncio.current_task()
        assert handler is not None
        self._handlers.add(handler)
        try:
            while (payload := await read_frame(reader, 1 << 20)) is not None:
                request = parse_frame(payload)
                self.calls.append(request["method"])
                if self.silent:
                    continue
                code, message, result = self.respond(request["method"], request["params"])
                if inspect.isawaitable(result):
                    result = await result
                writer.write(encode_frame({"id": request["id"], "error_code": code,
                                           "message": message, "result": result}))
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # the client went away, or the controller was stopped
        finally:
            self._handlers.discard(handler)
            writer.close()


class FakeQuorum:
    """``count`` fake controllers with ids 1..count; ``elect(n)`` makes n the active one."""

    def __init__(self, count: int) -> None:
        self.controllers = [FakeController(node_id) for node_id in range(1, count + 1)]

    def __getitem__(self, node_id: int) -> FakeController:
        return self.controllers[node_id - 1]

    @property
    def addresses(self) -> list[tuple[str, int]]:
        return [c.address for c in self.controllers]

    def elect(self, leader_id: int | None) -> None:
        for controller in self.controllers:
            controller.not_controller(leader_id)
            controller.active = controller.node_id == leader_id

    def calls(self) -> dict[int, list[str]]:
        return {c.node_id: list(c.calls) for c in self.controllers}

    async def __aenter__(self) -> FakeQuorum:
        for controller in self.controllers:
            await controller.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        for controller in self.controllers:
            if controller._server is not None:
                await controller.stop()
