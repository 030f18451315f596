"""A stand-in for the group coordinator's shell: ids, parked answers, an offsets log."""

from __future__ import annotations

from pylog_nb.broker.group import (
    AppendRecords,
    CommitAnswer,
    GroupCoordinator,
    JoinAnswer,
    SyncAnswer,
)
from pylog_nb.broker.group.storage import OffsetsBatch

RANGE = (("range", b"range-meta"),)
SESSION_MS = 10_000
REBALANCE_MS = 30_000


class Shell:
    """Drives a ``GroupCoordinator`` like the asyncio shell would, recording every answer."""

    def __init__(self, *, auto_append: bool = True, **options: object) -> None:
        options.setdefault("session_timeout_ms_min", 1)
        options.setdefault("initial_rebalance_delay_ms", 0)
        self.coordinator = GroupCoordinator(**options)  # type: ignore[arg-type]
        self.auto_append = auto_append
        self.request_id_next = 0
        self.joins: dict[int, JoinAnswer] = {}
        self.syncs: dict[int, SyncAnswer] = {}
        self.commits: dict[int, CommitAnswer] = {}
        self.pending_appends: list[AppendRecords] = []
        self.log: list[tuple[bytes, bytes | None]] = []  # every appended record, in order
        self.batches: list[OffsetsBatch] = []  # the same as the log's batches (one offset each)
        self.actions: list[object] = []

    def _id(self) -> int:
        self.request_id_next += 1
        return self.request_id_next

    def take(self, actions: list) -> None:
        for action in actions:
            self.actions.append(action)
            if isinstance(action, JoinAnswer):
                assert action.join_id not in self.joins, "join answered twice"
                self.joins[action.join_id] = action
            elif isinstance(action, SyncAnswer):
                assert action.sync_id not in self.syncs, "sync answered twice"
                self.syncs[action.sync_id] = action
            elif isinstance(action, CommitAnswer):
                assert action.commit_id not in self.commits, "commit answered twice"
                self.commits[action.commit_id] = action
            elif isinstance(action, AppendRecords):
                self.pending_appends.append(action)
        if self.auto_append:
            self.confirm_all()

    def confirm(self, error_code: int = 0) -> None:
        """Report the oldest pending append as done (written to the log if error_code is 0)."""
        append = self.pending_appends.pop(0)
        base_offset = -1
        if error_code == 0:
            base_offset = len(self.batches)
            self.log.extend(append.records)
            self.batches.append(OffsetsBatch(
                base_offset, append.records, append.producer_id, append.producer_id >= 0))
        self.take(self.coordinator.on_appended(append.append_id, error_code, append.now_ms,
                                               base_offset))

    def confirm_all(self) -> None:
        while self.pending_appends:
            self.confirm()

    def join(
        self,
        member_id: str = "",
        *,
        group: str = "g",
        protocols=RANGE,
        instance: str | None = None,
        now: int = 0,
        client: str = "client",
        require_known: bool = False,
        session_ms: int = SESSION_MS,
        rebalance_ms: int = REBALANCE_MS,
        protocol_type: str = "consumer",
    ) -> int:
        join_id = self._id()
        self.take(
            self.coordinator.join(
                group,
                member_id,
                instance,
                protocol_type,
                protocols,
                session_ms,
                rebalance_ms,
                client,
                now,
                join_id,
                require_known_member_id=require_known,
            )
        )
        return join_id

    def sync(
        self,
        member_id: str,
        generation: int,
        assignments=None,
        *,
        group: str = "g",
        now: int = 0,
        instance: str | None = None,
    ) -> int:
        sync_id = self._id()
        self.take(
            self.coordinator.sync(
                group,
                member_id,
                generation,
                assignments or {},
                now,
                sync_id,
                group_instance_id=instance,
            )
        )
        return sync_id

    def commit(
        self,
        offsets,
        *,
        member_id: str = "",
        generation: int = -1,
        group: str = "g",
        now: int = 0,
        instance: str | None = None,
    ) -> int:
        commit_id = self._id()
        self.take(
            self.coordinator.commit_offsets(
                group, member_id, generation, offsets, now, commit_id, group_instance_id=instance
            )
        )
        return commit_id

    def txn_commit(
        self,
        offsets,
        *,
        producer_id: int,
        producer_epoch: int = 0,
        member_id: str = "",
        generation: int = -1,
        group: str = "g",
        now: int = 0,
        instance: str | None = None,
    ) -> int:
        commit_id = self._id()
        self.take(
            self.coordinator.commit_txn_offsets(
                group, producer_id, producer_epoch, member_id, generation, offsets, now,
                commit_id, group_instance_id=instance,
            )
        )
        return commit_id

    def marker(self, producer_id: int, committed: bool) -> None:
        """WriteTxnMarkers on this partition: the marker lands in the log, then the shell hook."""
        self.batches.append(OffsetsBatch(len(self.batches), producer_id=producer_id,
                                         commit=committed))
        self.coordinator.complete_txn(producer_id, committed)

    def tick(self, now: int) -> None:
        self.take(self.coordinator.tick(now))

    def leave(self, *members: tuple[str, str | None], group: str = "g", now: int = 0):
        result = self.coordinator.leave(group, members, now)
        self.take(result.actions)
        return result

    def form_group(self, count: int, *, now: int = 0, protocols=RANGE) -> list[JoinAnswer]:
        """``count`` dynamic members join and sync (the leader assigns b"a-<member>")."""
        member_ids: list[str] = []
        answers: list[JoinAnswer] = []
        for index in range(count):
            # Each newcomer starts a rebalance that waits for the members already in.
            join_ids = [self.join(now=now, client=f"c{index}", protocols=protocols)]
            join_ids += [self.join(m, now=now, protocols=protocols) for m in member_ids]
            answers = [self.joins[j] for j in join_ids]
            member_ids = [a.member_id for a in answers]
        answers.sort(key=lambda a: int(a.member_id[1 : a.member_id.index("-")]))
        leader = next(a for a in answers if a.members)
        generation = leader.generation_id
        for answer in answers:
            if answer is not leader:
                self.sync(answer.member_id, generation, now=now)
        self.sync(
            leader.member_id,
            generation,
            {m.member_id: b"a-" + m.member_id.encode() for m in leader.members},
            now=now,
        )
        return answers
