"""A broker process: its node, network, introspection endpoint and link to the controllers.

Theory of operation (Kafka's BrokerServer): ``run_broker`` opens the node (logs and replicas on
disk), wires the link to the controllers into it before any request is served, listens, then
registers with the active controller and serves until told to stop.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ..process.shutdown import arrange_shutdown
from .admin_http import AdminHttpServer
from .config import BrokerConfig
from .network import BrokerServer
from .node import BrokerNode

log = logging.getLogger("pylog.broker")


async def run_broker(
    config: BrokerConfig, ready_fd: int | None, parent_fd: int | None, admin_port: int = 0
) -> None:
    """Run a broker until SIGTERM/SIGINT or until the supervisor's pipe closes.

    Once listening it writes "<kafka port> <admin port>\n" to ``ready_fd``. Every broker follows
    its controllers (``config.controllers``): they hold all of the metadata it serves.
    """
    if not config.controllers:
        raise ValueError("a broker needs its controllers: --controller HOST:PORT[,HOST:PORT...]")
    node = BrokerNode.open(config)
    link = link_to_controllers(node, config.controllers)
    server = BrokerServer(node)
    port = await server.start()
    admin = AdminHttpServer(node)
    admin_port = await admin.start(config.host, admin_port)
    await link.start()
    arrange_shutdown(server.stop, parent_fd, ready_fd, f"{port} {admin_port}")
    await server.stopped.wait()
    await link.stop()
    admin.close()
    log.info("broker %d stopped cleanly", config.broker_id)


def link_to_controllers(node: BrokerNode, controllers: Sequence[tuple[str, int]]):
    """The link to the active one of these controllers: metadata, heartbeats, admin, producer
    ids. It is wired into ``node`` before any request is served; ``start`` registers."""
    from .cluster_link import ClusterLink
    from .controller_admin import ControllerAdmin

    link = ClusterLink(node, controllers)
    node.admin = ControllerAdmin(link)
    node.producer_id_source = link.allocate_producer_id
    return link
