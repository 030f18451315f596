"""How a broker or controller process ends: SIGTERM/SIGINT, or its supervisor going away.

The supervisor (LocalCluster) keeps the write end of a pipe whose read end every child watches:
when the supervisor dies for any reason the kernel closes it, the child reads EOF and stops
cleanly, so no process outlives the notebook kernel that started it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Awaitable, Callable

log = logging.getLogger("pylog")


def arrange_shutdown(
    stop: Callable[[], Awaitable[None]], parent_fd: int | None, ready_fd: int | None, ready: str
) -> None:
    """Stop on SIGTERM/SIGINT or when ``parent_fd`` closes; report ``ready`` on ``ready_fd``."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: asyncio.ensure_future(stop()))
    if parent_fd is not None:
        loop.add_reader(parent_fd, _on_parent_pipe, parent_fd, stop)
    if ready_fd is not None:
        os.write(ready_fd, f"{ready}\n".encode())
        os.close(ready_fd)


def _on_parent_pipe(fd: int, stop: Callable[[], Awaitable[None]]) -> None:
    if os.read(fd, 1) == b"":
        log.warning("supervisor is gone; shutting down")
        asyncio.get_running_loop().remove_reader(fd)
        asyncio.ensure_future(stop())
