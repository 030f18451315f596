"""A broker process: its node, network, introspection endpoint and link to the controllers.

Theory of operation (Kafka's BrokerServer): ``run_broker`` opens the node (logs and replicas on
disk), wires the link to the controllers into it before any request is served, listens, then
registers with the active controller and serves until told to stop.
"""

from __future__ import annotations

import logging

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
    link = node.link
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

