"""Request handlers, one function per API key, in two tables (Kafka's ``KafkaApis``).

``CORE_HANDLERS`` do their work in the broker core: ``(core, request) -> response``, where a
handler that waits (for replication, a coordinator, data to fetch) is a coroutine that awaits only
the core's ``Pending`` values. ``handle_in_core`` runs one to its end with ``pending.drive``; the
asyncio server and the seeded simulation both call it, so the simulation runs the very handlers
the broker serves clients with. ``SHELL_HANDLERS`` need the asyncio shell (``(node, request)``):
calls to the active controller (topic admin, FindCoordinator creating an internal topic) and what
only the node knows (its listeners for Metadata). A handler may return None when the client
expects no response (Produce with acks=0), and a Fetch handler returns pieces already encoded.
Every handler is wrapped by ``authorization.guard_all``: an API refused whole (a group it may not
READ, a transactional id it may not WRITE) is answered before its handler runs; checks per
resource are the handlers' own (``authorization.caller``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias

from ...protocol import versions as v
from ...protocol.codec import Request
from ..authorization import guard_all
from ..core import BrokerCore
from ..node import BrokerNode
from ..pending import Fail, drive
from .admin import (
    handle_alter_configs,
    handle_create_partitions,
    handle_create_topics,
    handle_delete_topics,
    handle_describe_configs,
    handle_incremental_alter_configs,
)
from .consumer_groups import handle_consumer_group_describe, handle_consumer_group_heartbeat
from .fetch import handle_fetch
from .groups import (
    handle_delete_groups,
    handle_describe_groups,
    handle_find_coordinator,
    handle_heartbeat,
    handle_join_group,
    handle_leave_group,
    handle_list_groups,
    handle_offset_commit,
    handle_offset_delete,
    handle_offset_fetch,
    handle_sync_group,
    handle_txn_offset_commit,
)
from .metadata import handle_api_versions, handle_describe_cluster, handle_metadata
from .offsets import (
    handle_delete_records,
    handle_list_offsets,
    handle_offset_for_leader_epoch,
)
from .produce import handle_produce
from .security import (
    handle_alter_client_quotas,
    handle_alter_user_scram_credentials,
    handle_create_acls,
    handle_delete_acls,
    handle_describe_acls,
    handle_describe_client_quotas,
    handle_describe_user_scram_credentials,
)
from .share import (
    handle_share_acknowledge,
    handle_share_fetch,
    handle_share_group_describe,
    handle_share_group_heartbeat,
)
from .share_offsets import (
    handle_alter_share_group_offsets,
    handle_delete_share_group_offsets,
    handle_describe_share_group_offsets,
)
from .share_state import (
    handle_delete_share_group_state,
    handle_initialize_share_group_state,
    handle_read_share_group_state,
    handle_read_share_group_state_summary,
    handle_write_share_group_state,
)
from .txn import (
    handle_add_offsets_to_txn,
    handle_add_partitions_to_txn,
    handle_describe_transactions,
    handle_end_txn,
    handle_init_producer_id,
    handle_list_transactions,
    handle_write_txn_markers,
)

# A response dict, pieces already encoded (Fetch), or None: no response (Produce with acks=0)
Response: TypeAlias = dict[str, Any] | list[Any] | None
CoreHandler: TypeAlias = Callable[[BrokerCore, Request], Response | Awaitable[Response]]
ShellHandler: TypeAlias = Callable[[BrokerNode, Request], Response | Awaitable[Response]]

CORE_HANDLERS: dict[int, CoreHandler] = guard_all({
    v.PRODUCE_KEY: handle_produce,
    v.FETCH_KEY: handle_fetch,
    v.LIST_OFFSETS_KEY: handle_list_offsets,
    v.DELETE_RECORDS_KEY: handle_delete_records,
    v.INIT_PRODUCER_ID_KEY: handle_init_producer_id,
    v.OFFSET_FOR_LEADER_EPOCH_KEY: handle_offset_for_leader_epoch,
    v.OFFSET_COMMIT_KEY: handle_offset_commit,
    v.OFFSET_FETCH_KEY: handle_offset_fetch,
    v.JOIN_GROUP_KEY: handle_join_group,
    v.HEARTBEAT_KEY: handle_heartbeat,
    v.LEAVE_GROUP_KEY: handle_leave_group,
    v.SYNC_GROUP_KEY: handle_sync_group,
    v.DESCRIBE_GROUPS_KEY: handle_describe_groups,
    v.LIST_GROUPS_KEY: handle_list_groups,
    v.DELETE_GROUPS_KEY: handle_delete_groups,
    v.OFFSET_DELETE_KEY: handle_offset_delete,
    v.ADD_PARTITIONS_TO_TXN_KEY: handle_add_partitions_to_txn,
    v.ADD_OFFSETS_TO_TXN_KEY: handle_add_offsets_to_txn,
    v.END_TXN_KEY: handle_end_txn,
    v.WRITE_TXN_MARKERS_KEY: handle_write_txn_markers,
    v.DESCRIBE_TRANSACTIONS_KEY: handle_describe_transactions,
    v.LIST_TRANSACTIONS_KEY: handle_list_transactions,
    v.TXN_OFFSET_COMMIT_KEY: handle_txn_offset_commit,
    v.CONSUMER_GROUP_HEARTBEAT_KEY: handle_consumer_group_heartbeat,
    v.CONSUMER_GROUP_DESCRIBE_KEY: handle_consumer_group_describe,
    v.SHARE_GROUP_HEARTBEAT_KEY: handle_share_group_heartbeat,
    v.SHARE_GROUP_DESCRIBE_KEY: handle_share_group_describe,
    v.SHARE_FETCH_KEY: handle_share_fetch,
    v.SHARE_ACKNOWLEDGE_KEY: handle_share_acknowledge,
    v.INITIALIZE_SHARE_GROUP_STATE_KEY: handle_initialize_share_group_state,
    v.READ_SHARE_GROUP_STATE_KEY: handle_read_share_group_state,
    v.WRITE_SHARE_GROUP_STATE_KEY: handle_write_share_group_state,
    v.DELETE_SHARE_GROUP_STATE_KEY: handle_delete_share_group_state,
    v.READ_SHARE_GROUP_STATE_SUMMARY_KEY: handle_read_share_group_state_summary,
    v.DESCRIBE_SHARE_GROUP_OFFSETS_KEY: handle_describe_share_group_offsets,
    v.ALTER_SHARE_GROUP_OFFSETS_KEY: handle_alter_share_group_offsets,
    v.DELETE_SHARE_GROUP_OFFSETS_KEY: handle_delete_share_group_offsets,
})
SHELL_HANDLERS: dict[int, ShellHandler] = guard_all({
    v.METADATA_KEY: handle_metadata,
    v.API_VERSIONS_KEY: handle_api_versions,
    v.CREATE_TOPICS_KEY: handle_create_topics,
    v.DELETE_TOPICS_KEY: handle_delete_topics,
    v.DESCRIBE_CONFIGS_KEY: handle_describe_configs,
    v.ALTER_CONFIGS_KEY: handle_alter_configs,
    v.CREATE_PARTITIONS_KEY: handle_create_partitions,
    v.INCREMENTAL_ALTER_CONFIGS_KEY: handle_incremental_alter_configs,
    v.DESCRIBE_CLUSTER_KEY: handle_describe_cluster,
    v.FIND_COORDINATOR_KEY: handle_find_coordinator,
    v.CREATE_ACLS_KEY: handle_create_acls,
    v.DESCRIBE_ACLS_KEY: handle_describe_acls,
    v.DELETE_ACLS_KEY: handle_delete_acls,
    v.DESCRIBE_USER_SCRAM_CREDENTIALS_KEY: handle_describe_user_scram_credentials,
    v.ALTER_USER_SCRAM_CREDENTIALS_KEY: handle_alter_user_scram_credentials,
    v.DESCRIBE_CLIENT_QUOTAS_KEY: handle_describe_client_quotas,
    v.ALTER_CLIENT_QUOTAS_KEY: handle_alter_client_quotas,
})
# Served by the connection itself (authentication.py), before and besides any handler.
CONNECTION_APIS = frozenset({v.SASL_HANDSHAKE_KEY, v.SASL_AUTHENTICATE_KEY})
assert not set(CORE_HANDLERS) & set(SHELL_HANDLERS), "one handler per API"
assert set(CORE_HANDLERS) | set(SHELL_HANDLERS) | CONNECTION_APIS == set(v.API_VERSIONS), \
    "every advertised API has a handler"


def handle_in_core(core: BrokerCore, request: Request, respond: Callable[[Response], None],
                   fail: Fail) -> None:
    """Serve a request of ``CORE_HANDLERS``: ``respond(response)`` now or once what it waits
    for is resolved; ``fail(error)`` if the handler raised."""
    try:
        result = CORE_HANDLERS[request.header.api_key](core, request)
    except Exception as error:  # noqa: BLE001 - the caller answers or logs it
        fail(error)
        return
    if isinstance(result, Awaitable):
        drive(result, respond, fail)  # type: ignore[arg-type]
    else:
        respond(result)
