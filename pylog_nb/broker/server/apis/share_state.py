"""The share coordinator on the wire (KIP-932): Initialize-, Read-, Write- and
DeleteShareGroupState and ReadShareGroupStateSummary, which partition leaders send it; run in
the broker core.

Each partition of a request is routed to this broker's shard for it (NOT_COORDINATOR when
another broker leads its ``__share_group_state`` partition); a change is answered once its
records are committed (``ShareCoordinatorRuntime.apply``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ...errors import Errors
from ...protocol.codec import Request
from ...share.coordinator import ShareCoordinatorShard, SharePartitionKey
from ...share.persisted import StateBatch
from ..core import BrokerCore

PartitionCall = Callable[[ShareCoordinatorShard, SharePartitionKey, object], Awaitable[dict]]


async def _each(core: BrokerCore, request: Request, call: PartitionCall) -> dict:
    body = request.body
    results = []
    for topic in body.topics:
        partitions = []
        for data in topic.partitions:
            key = SharePartitionKey(body.group_id, topic.topic_id, data.partition)
            shard = core.share_state.shard_for(key)
            if shard is None:
                partitions.append({"partition": data.partition,
                                   "error_code": Errors.NOT_COORDINATOR, "error_message": None,
                                   "state_epoch": -1, "leader_epoch": -1, "start_offset": -1,
                                   "state_batches": []})
                continue
            partitions.append({"partition": data.partition, "error_message": None,
                               **await call(shard, key, data)})
        results.append({"topic_id": topic.topic_id, "partitions": partitions})
    return {"results": results}


async def handle_read_share_group_state(core: BrokerCore, request: Request) -> dict:
    async def read(shard: ShareCoordinatorShard, key: SharePartitionKey, data) -> dict:
        result = shard.read(key, data.leader_epoch, now_ms=core.now_ms())
        error = await core.share_state.apply(shard, result.error_code, list(result.records))
        return {"error_code": error, "state_epoch": result.state_epoch,
                "start_offset": result.start_offset,
                "state_batches": [_batch(b) for b in result.state_batches]}

    return await _each(core, request, read)


async def handle_read_share_group_state_summary(core: BrokerCore, request: Request) -> dict:
    async def summary(shard: ShareCoordinatorShard, key: SharePartitionKey, data) -> dict:
        result = shard.read_summary(key)
        error = await core.share_state.apply(shard, result.error_code, [])
        return {"error_code": error, "state_epoch": result.state_epoch,
                "leader_epoch": result.leader_epoch, "start_offset": result.start_offset}

    return await _each(core, request, summary)


async def handle_initialize_share_group_state(core: BrokerCore, request: Request) -> dict:
    async def initialize(shard: ShareCoordinatorShard, key: SharePartitionKey, data) -> dict:
        error_code, records = shard.initialize(key, data.state_epoch, data.start_offset,
                                               now_ms=core.now_ms())
        return {"error_code": await core.share_state.apply(shard, error_code, records)}

    return await _each(core, request, initialize)


async def handle_write_share_group_state(core: BrokerCore, request: Request) -> dict:
    async def write(shard: ShareCoordinatorShard, key: SharePartitionKey, data) -> dict:
        batches = [StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                   for b in data.state_batches]
        error_code, records = shard.write(key, data.state_epoch, data.leader_epoch,
                                          data.start_offset, batches, now_ms=core.now_ms())
        return {"error_code": await core.share_state.apply(shard, error_code, records)}

    return await _each(core, request, write)


async def handle_delete_share_group_state(core: BrokerCore, request: Request) -> dict:
    async def delete(shard: ShareCoordinatorShard, key: SharePartitionKey, data) -> dict:
        return {"error_code": await core.share_state.apply(shard, Errors.NONE,
                                                           shard.delete(key))}

    return await _each(core, request, delete)


def _batch(batch: StateBatch) -> dict:
    return {"first_offset": batch.first_offset, "last_offset": batch.last_offset,
            "delivery_state": batch.delivery_state, "delivery_count": batch.delivery_count}
