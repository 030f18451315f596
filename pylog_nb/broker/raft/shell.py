"""RaftShell: the asyncio shell of one voter (Kafka's KafkaNetworkChannel and the raft I/O thread).

Theory of operation: the core (``RaftNode``) decides everything; the shell only moves its
messages and fires its timer. It listens on ``host:port`` for the other voters; every frame
it reads (``rpc_framing.py``, as the controller RPC's: an int32 length, then a JSON object) is
one message, ``{"id": 0, "from": <voter>, ...codec.encode_message}``, handed to
``node.handle``. What the core returns is queued per destination and written on one outbound
connection per peer, opened when first needed and again after it breaks. Messages are one-way:
an answer is a message of its own, on the answerer's connection.

A message that cannot be written (the peer is down, the connection broke) is dropped; a fetch
among them is reported to the core (``request_failed``), as a refused connection is. A peer that
sends a malformed frame is disconnected after one log line. The timer polls the core every
``TICK_MS``; ``propose`` appends on the leader and waits until the high watermark covers the
batch (committed) or this voter stops leading (``NotLeaderError``: the batch may or may not
survive the next leader, the caller decides, as after a lost produce acknowledgement).

With a ``token`` (the cluster's internal token, issue 23), every outgoing connection starts with
an ``authenticate`` frame carrying it, and an incoming one is served only once its first frame
is such a frame with the same token (``controller/auth.py``): a peer without it is closed before
anything it sends reaches the core (no vote, no fetch).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Protocol

from ..controller.auth import accept_connection, authenticate_request
from ..rpc_framing import FrameError, encode_frame, parse_frame, read_frame
from .codec import decode_message, encode_message
from .messages import FetchRequest, FetchSnapshotRequest, Message, Send
from .node import NotLeaderError, RaftNode, Role

log = logging.getLogger("pylog.raft")

TICK_MS = 20  # the core's timers are hundreds of ms; this is their resolution
FRAME_BYTES_MAX = 64 * 1024 * 1024  # a fetch answer of READ_BATCHES_MAX large batches, a snapshot
CONNECT_TIMEOUT_S = 1.0
OUTBOX_MAX = 1_000  # messages queued for one peer; more are dropped (the core resends)


class Core(Protocol):
    """What the shell feeds: the RaftNode itself, or a state machine around it (the quorum
    controller) that steps it and adds messages of its own."""

    def poll(self, now_ms: int) -> list[Send]: ...

    def handle(self, sender: int, message: Message, now_ms: int) -> list[Send]: ...

    def request_failed(self, destination: int, message: Message, now_ms: int) -> list[Send]: ...


class RaftShell:
    """Runs one ``RaftNode`` on sockets; see the module docstring."""

    def __init__(self, node: RaftNode, peers: dict[int, tuple[str, int]],
                 host: str = "127.0.0.1", port: int = 0,
                 clock: Callable[[], int] | None = None, core: Core | None = None,
                 token: str | None = None) -> None:
        assert node.node_id not in peers and set(peers) == node.voters - {node.node_id}
        self.node = node
        self.core: Core = node if core is None else core
        self.peers = peers
        self.host = host
        self.port = port
        self.on_change: Callable[[], None] = lambda: None  # after every step: HW, role moved
        self.isolated = False  # fault injection: nothing reaches or leaves the other voters
        self.token = token  # the cluster's internal token: presented, and required of peers
        self._clock = clock or (lambda: time.monotonic_ns() // 1_000_000)
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task] = set()
        self._outboxes: dict[int, asyncio.Queue[Message]] = {}
        self._changed = asyncio.Event()  # set after every step; propose waits on it

    # -- life ------------------------------------------------------------------------------------

    async def start(self) -> int:
        """Listen, start the timer and one sender per peer; the bound port."""
        self._server = await asyncio.start_server(self._serve, self.host, self.port,
                                                  reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]
        self._spawn(self._tick_loop())
        for peer in sorted(self.peers):
            self._outboxes[peer] = asyncio.Queue(OUTBOX_MAX)
            self._spawn(self._send_loop(peer))
        return self.port

    async def stop(self) -> None:
        """Stop listening and every task; the log stays open for the caller to close."""
        if self._server is not None:
            self._server.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _spawn(self, coroutine) -> None:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- the core --------------------------------------------------------------------------------

    def send(self, sends: list[Send]) -> None:
        """Queue messages the core produced outside the shell's own calls (a proposal)."""
        self._after(sends)

    def _after(self, sends: list[Send]) -> None:
        """Queue what the core wants sent, and tell whoever waits that something moved."""
        for send in sends:
            outbox = self._outboxes.get(send.destination)
            if outbox is None or outbox.full() or self.isolated:
                self._failed(send.destination, send.message)
            else:
                outbox.put_nowait(send.message)
        self._changed.set()
        self._changed = asyncio.Event()
        self.on_change()

    def _failed(self, destination: int, message: Message) -> None:
        if isinstance(message, FetchRequest | FetchSnapshotRequest):
            self._after(self.core.request_failed(destination, message, self._clock()))

    async def _tick_loop(self) -> None:
        while True:
            self._after(self.core.poll(self._clock()))
            await asyncio.sleep(TICK_MS / 1000)

    async def propose(self, records: list[bytes]) -> int:
        """Replicate ``records`` as one batch; its end offset once committed. NotLeaderError if
        this voter does not lead, or stops leading before the batch is committed."""
        end, sends = self.node.propose(records, self._clock())
        epoch = self.node.epoch
        self._after(sends)
        while self.node.high_watermark < end:
            if self.node.role is not Role.LEADER or self.node.epoch != epoch:
                raise NotLeaderError(self.node.node_id, self.node.leader_id, self.node.epoch)
            await self._changed.wait()
        return end

    # -- the network -----------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)  # stop() ends accepted connections too (Server.close does not)
        task.add_done_callback(self._tasks.discard)
        try:
            if not await accept_connection(reader, writer, self.token, log,
                                           f"raft voter {self.node.node_id}", answer=False):
                return
            while (payload := await read_frame(reader, FRAME_BYTES_MAX)) is not None:
                frame = parse_frame(payload)
                sender = frame.get("from")
                if sender not in self.peers:
                    raise FrameError(f"frame from {str(sender)[:20]}, not a voter")
                message = decode_message(frame)
                if not self.isolated:
                    self._after(self.core.handle(sender, message, self._clock()))
        except (FrameError, ValueError) as error:
            log.warning("raft voter %d: dropping a peer connection: %s", self.node.node_id, error)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # a cancelled handler ends quietly: Python 3.11's stream callback would log it
        finally:
            writer.close()

    async def _send_loop(self, peer: int) -> None:
        """Write the messages queued for ``peer``, reconnecting as needed."""
        outbox = self._outboxes[peer]
        writer: asyncio.StreamWriter | None = None
        while True:
            message = await outbox.get()
            try:
                if writer is None or writer.is_closing():
                    writer = await self._connect(peer)
                writer.write(encode_frame({"id": 0, "from": self.node.node_id,
                                           **encode_message(message)}))
                await writer.drain()
            except (OSError, TimeoutError):
                if writer is not None:
                    writer.close()
                writer = None
                self._failed(peer, message)

    async def _connect(self, peer: int) -> asyncio.StreamWriter:
        host, port = self.peers[peer]
        _reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port),
                                                 CONNECT_TIMEOUT_S)
        if self.token is not None:
            writer.write(authenticate_request(self.token))
        return writer
