"""LocalCluster: start, signal and stop broker and controller processes on loopback.

Theory of operation: every broker is a separate ``python -m pylog_nb.broker`` process with its
own directory ``<data_dir>/broker-<id>/``. A cluster of several brokers also runs a quorum of
controllers (KRaft's shape): ``python -m pylog_nb.broker.controller`` processes with ids 1..M
(their own namespace, like Kafka's controller node ids) and directories
``<data_dir>/controller-<id>/``. The controllers elect one of themselves by Raft; that leader is
the *active* controller, the one brokers follow and the controller methods here ask.

The supervisor holds the write end of one pipe whose read end every process watches: when the
supervisor dies for any reason the kernel closes the pipe and each process shuts down cleanly,
so no orphans survive a kernel restart. A process reports readiness by writing its bound port to
a second, per-start pipe once it listens (a broker once its logs are recovered; a controller
before any election). Ports are kept in ``cluster.json`` so a restart comes back on the same
address. A controller's RPC and Raft ports are chosen before any controller starts, since every
voter must know the others' Raft addresses: bind port 0, read the port, close.

A start on a data directory whose cluster already runs, here or in another process (a notebook
cell run again after a failure), looks first (``leftovers.py``: each node directory's lock names
its live process): a whole and healthy cluster is reused, anything else is stopped and the
cluster started again on the same data, and either is said in one line.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..broker.security import secrets, tls
from . import credentials
from .leftovers import StartLockTimeout, is_paused, running_nodes, start_lock, stop_nodes

READY_TIMEOUT_S = 60.0  # recovery of a large log can take a while
READY_POLL_S = 0.05
BROKERS_MAX = 9
CONTROLLERS_MAX = 5  # KRaft's advice: 3 or 5 voters; more only slow every commit down
CONTROLLERS_DEFAULT = 3  # survives one controller failure
STOP_TIMEOUT_S = 10.0
STOPPED_WAIT_S = 2.0  # a SIGSTOPped process shows state T once the kernel ran it (busy machine)
LOG_TAIL_BYTES = 2000
CLUSTER_FILE = "cluster.json"
CLIENT_PROPERTIES_FILE = "client.properties"  # the owner's client settings, for kcat -F
# A cluster's files are its owner's alone: directories it creates 0700, files 0600 (the nodes
# run under this umask), so another account on a shared machine cannot read its records.
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
PRIVATE_UMASK = 0o077
ADMIN_TIMEOUT_S = 10.0
# A live controller answers describe in milliseconds; one slower than this is wedged, and asking
# it must not hold up finding the active one.
DESCRIBE_TIMEOUT_S = 2.0
SASL = "sasl"  # SASL_PLAINTEXT listeners, an admin principal, tokens: the default
NO_SECURITY = "none"  # PLAINTEXT listeners and open admin endpoints, for those who ask
SECURITY_MODES = (SASL, NO_SECURITY)
# The brokers' listener: SASL_SSL with tls=True (a CA of the cluster's own, security="sasl" only)
SASL_PLAINTEXT = "SASL_PLAINTEXT"
SASL_SSL = "SASL_SSL"
PLAINTEXT = "PLAINTEXT"
CLIENT_MECHANISM = "SCRAM-SHA-512"  # what the owner's clients authenticate with
HEALTHY = "up"  # a node start() reuses: running as recorded, answering, not paused or isolated
_WAS = {"down": "was down", "silent": "did not answer", "extra": "is not in this cluster",
        "unrecorded": "is not in cluster.json",
        "protocol": "listens with another security protocol"}  # how start() names what is wrong


class ClusterError(RuntimeError):
    """A process could not be started or controlled; the message says why in one line."""


@dataclass
class _Node:
    """A broker or controller process: its data directory, ports and process."""

    kind: str  # "broker" or "controller"
    node_id: int
    data_dir: Path
    port: int = 0  # brokers: Kafka clients; controllers: the controller RPC
    admin_port: int = 0  # brokers only: the loopback introspection endpoint
    raft_port: int = 0  # controllers only: where the other voters reach it
    process: subprocess.Popen[bytes] | _AttachedProcess | None = None
    paused: bool = False

    @property
    def name(self) -> str:
        return f"{self.kind} {self.node_id}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / f"{self.kind}.log"

    @property
    def proc(self) -> subprocess.Popen[bytes] | _AttachedProcess:
        """The process, once started or attached (callers check ``running`` first)."""
        assert self.process is not None, f"{self.name} was never started"
        return self.process

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def answering(self) -> bool:
        return self.running and not self.paused

    @property
    def state(self) -> str:
        """up, paused or down, as a fault-injecting user sees it."""
        return "down" if not self.running else "paused" if self.paused else "up"


class LocalCluster:
    """Broker processes, and a quorum of controller processes, on 127.0.0.1 sharing one data
    directory.

    ``controllers`` defaults to 3 for three or more brokers and 1 for fewer (1 to 5). Every
    broker follows them, whatever the size of the cluster: there is one metadata path.

    ``tls=True`` (with ``security="sasl"``) puts the brokers' listeners under TLS (SASL_SSL) with
    a CA generated for this data directory (``<data_dir>/tls/ca.pem``); ``client_config()``
    names it (``ssl.ca.location``).

    >>> with LocalCluster(brokers=3) as cluster:
    ...     print(cluster.bootstrap_servers, cluster.active_controller())
    """

    def __init__(
        self,
        brokers: int = 1,
        data_dir: str | Path | None = None,
        host: str = "127.0.0.1",
        broker_args: tuple[str, ...] = (),
        controllers: int | None = None,
        security: str = SASL,
        tls: bool = False,
    ) -> None:
        if security not in SECURITY_MODES:
            raise ClusterError(f"security must be one of {SECURITY_MODES}, got {security!r}")
        if tls and security != SASL:
            raise ClusterError(f"tls=True needs security={SASL!r} (SASL_SSL listeners), "
                               f"not {security!r}")
        if not 1 <= brokers <= BROKERS_MAX:
            raise ClusterError(f"brokers must be between 1 and {BROKERS_MAX}, got {brokers}")
        if controllers is not None and not 1 <= controllers <= CONTROLLERS_MAX:
            raise ClusterError(f"controllers must be between 1 and {CONTROLLERS_MAX}, "
                               f"got {controllers}")
        self._temporary = data_dir is None
        self.data_dir = Path(tempfile.mkdtemp(prefix="pylog-") if data_dir is None else data_dir)
        self.data_dir.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
        self.host = host
        self.broker_args = tuple(broker_args)
        self.security = security
        self.secrets = self._own_secrets() if security == SASL else None
        self.tls = tls
        self.tls_files = self._own_tls_files() if tls else None
        saved = self._load()
        self.brokers = {i: self._broker_node(i, saved) for i in range(1, brokers + 1)}
        count = _controllers_for(brokers) if controllers is None else controllers
        self._controllers = {i: self._controller_node(i, saved) for i in range(1, count + 1)}
        self._active_hint: int | None = None  # the active controller as last found
        self._parent_r, self._parent_w = os.pipe()
        self._started = False

    def _own_secrets(self) -> secrets.ClusterSecrets:
        """This data directory's secrets, generated (0600) the first time."""
        path = self.data_dir / secrets.SECRETS_FILE
        if not path.exists():
            secrets.write(path, secrets.generate())
        try:
            return secrets.load(path)
        except secrets.SecretsError as error:
            raise ClusterError(str(error)) from None

    def _own_tls_files(self) -> tls.TlsFiles:
        """This data directory's CA and broker certificate, generated (0600) the first time."""
        try:
            return tls.ensure_files(self.data_dir, [self.host])
        except tls.TlsError as error:
            raise ClusterError(str(error)) from None

    @property
    def security_protocol(self) -> str:
        """The brokers' listener: SASL_SSL, SASL_PLAINTEXT or PLAINTEXT."""
        if self.secrets is None:
            return PLAINTEXT
        return SASL_SSL if self.tls_files is not None else SASL_PLAINTEXT

    @property
    def ca_file(self) -> Path | None:
        """The CA certificate clients verify the brokers with (None: no TLS)."""
        return None if self.tls_files is None else self.tls_files.ca

    @property
    def controller_token(self) -> str | None:
        """What the controllers take before any call (None: a cluster without security)."""
        return None if self.secrets is None else self.secrets.internal_token

    def client_config(self, **settings: str) -> dict[str, str]:
        """The settings any Kafka client needs to reach this cluster as its owner (librdkafka
        and Java names): ``Producer(cluster.client_config())``, ``{**cluster.client_config(),
        "group.id": "g"}``."""
        config = {"bootstrap.servers": self.bootstrap_servers, **self._security_settings()}
        return {**config, **settings}

    def _security_settings(self) -> dict[str, str]:
        if self.secrets is None:
            return {}
        settings = {"security.protocol": self.security_protocol,
                    "sasl.mechanism": CLIENT_MECHANISM, "sasl.username": self.secrets.admin_user,
                    "sasl.password": self.secrets.admin_password}
        if self.tls_files is not None:
            settings["ssl.ca.location"] = str(self.tls_files.ca)
        return settings

    @property
    def client_properties(self) -> Path:
        """A librdkafka properties file (0600) with ``client_config()``: ``kcat -F`` reads it,
        and no password goes on a command line another account can see."""
        return self.data_dir / CLIENT_PROPERTIES_FILE

    def kcat_command(self, *args: str) -> str:
        """A kcat command line that reaches this cluster as its owner."""
        return " ".join(["kcat", "-F", str(self.client_properties), *args])

    def _write_client_properties(self) -> None:
        lines = [f"{key}={value}" for key, value in self.client_config().items()]
        path = self.client_properties
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE_MODE),
                  "w") as file:
            file.write("\n".join(lines) + "\n")

    def _publish_credentials(self) -> None:
        self._write_client_properties()
        credentials.publish(
            self.data_dir, [f"{self.host}:{b.port}" for b in self.brokers.values()],
            [f"{self.host}:{b.admin_port}" for b in self.brokers.values()],
            self._security_settings(),
            None if self.secrets is None else self.secrets.admin_http_token)

    def __repr__(self) -> str:
        state = "running" if self._started else "stopped"
        servers = self.bootstrap_servers if self._started else ""
        return (f"LocalCluster(brokers={len(self.brokers)}, controllers={len(self._controllers)}"
                f", {state}, bootstrap_servers={servers!r}, data_dir={str(self.data_dir)!r})")

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> LocalCluster:
        """Start every controller and broker; wait until a controller is active and every broker
        serves a full cluster view.

        If this data directory's cluster already runs (a notebook cell run twice, here or in
        another process), reuse it when every node runs, answers and is neither paused nor
        isolated; otherwise stop what is left of it and start it again on the same data. Either
        is said in one line.
        """
        try:
            with start_lock(self.data_dir):
                self._start_locked()
        except StartLockTimeout as error:
            raise ClusterError(str(error)) from None
        if self._temporary:  # a kernel that exits without stop() leaves no /tmp/pylog-* behind
            atexit.register(_stop_at_exit, weakref.ref(self))
        return self

    def _start_locked(self) -> None:
        self._load_ports()  # another process may have started this directory since __init__
        if self._parent_w < 0:  # stop() closed the pipe: started again
            self._parent_r, self._parent_w = os.pipe()
        if not self._reuse_or_clear():
            self._pick_controller_ports()
            self._spawn_all(self._nodes())
            self._save()
        self._started = True
        self._publish_credentials()
        self.wait_until_ready()

    def _reuse_or_clear(self) -> bool:
        """Attach to this data directory's running cluster if it is whole and healthy (True);
        else stop whatever of it still runs (False)."""
        found = running_nodes(self.data_dir)
        if not found:
            return False
        health = self._health(found)
        if all(state == HEALTHY for state in health.values()):
            for node in self._nodes():
                node.process = _AttachedProcess(found[node.data_dir.name])
                node.paused = False
            print(f"reusing the cluster already running on {self.data_dir}")
            return True
        try:
            stop_nodes(self.data_dir, found)
        except RuntimeError as error:
            raise ClusterError(str(error)) from None
        troubles = ", ".join(f"{name} {_WAS.get(state, state)}" for name, state in health.items()
                             if state != HEALTHY)
        print(f"stopped what was left of the cluster on {self.data_dir} ({troubles}); "
              f"starting it again")
        return False

    def _health(self, found: dict[str, int]) -> dict[str, str]:
        """Each node's state, brokers first, and any node running here that this cluster does
        not have: "up" when it runs as recorded, answers, and is neither paused nor isolated."""
        saved = self._load()
        pids = {f"broker-{k}": v for k, v in saved.get("pids", {}).items()}
        pids.update({f"controller-{k}": v.get("pid")
                     for k, v in saved.get("controllers", {}).items()})
        nodes = [*self.brokers.values(), *self._controllers.values()]
        health = {node.name: self._node_health(node, found.get(node.data_dir.name),
                                               pids.get(node.data_dir.name))
                  for node in nodes}
        for extra in sorted(found.keys() - {node.data_dir.name for node in nodes}):
            health[extra.replace("-", " ")] = "extra"
        recorded = saved.get("security_protocol")  # absent in a cluster.json of before TLS
        if recorded is not None and recorded != self.security_protocol:
            for node in self.brokers.values():
                if health[node.name] == HEALTHY:
                    health[node.name] = "protocol"
        return health

    def _node_health(self, node: _Node, pid: int | None, saved_pid: int | None) -> str:
        if pid is None:
            return "down"
        if pid != saved_pid:  # its ports are not the ones cluster.json gives
            return "unrecorded"
        if is_paused(pid):
            return "paused"
        view = self._health_view(node)
        if view is None:
            return "silent"
        return "isolated" if view.get("isolated") else HEALTHY

    def _health_view(self, node: _Node) -> dict | None:
        """What a live node says of itself (its isolated flag), or None if it does not answer."""
        if node.kind == "controller":
            described = self._describe(node, quorum_only=True)
            return None if described is None else described["quorum"]
        try:
            return self.admin_get(f"http://{self.host}:{node.admin_port}/v1/broker",
                                  timeout_s=DESCRIBE_TIMEOUT_S)
        except (OSError, ValueError):
            return None

    def wait_until_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Wait until a controller is active and every running broker is registered, unfenced
        and sees all live peers."""
        running = {i for i, b in self.brokers.items() if b.answering}
        deadline = time.monotonic() + timeout_s
        active = None
        while time.monotonic() < deadline:
            if active is None:
                active = self.active_controller()
            if active is not None and self._cluster_view_complete(running):
                return
            time.sleep(READY_POLL_S)
        if active is None:
            raise ClusterError(f"no controller of {self.controllers} became active within "
                               f"{timeout_s:.0f}s")
        raise ClusterError(f"brokers {sorted(running)} did not all join within {timeout_s:.0f}s")

    def _cluster_view_complete(self, running: set[int]) -> bool:
        try:
            views = [self.admin_get(f"{url}/v1/broker") for url in self.admin_urls().values()]
        except OSError:
            return False
        return all(set(v["live_brokers"]) >= running for v in views)

    def stop(self) -> None:
        """Stop every broker, then every controller, cleanly (SIGTERM, then SIGKILL after a
        grace period)."""
        for group in (self.brokers.values(), self._controllers.values()):
            for node in group:
                if node.running:
                    _terminate(node)
            for node in group:
                self._reap(node)
        if self._parent_w >= 0:
            os.close(self._parent_w)
            os.close(self._parent_r)
            self._parent_w = self._parent_r = -1
        credentials.withdraw(self.data_dir)
        if self._temporary:
            shutil.rmtree(self.data_dir, ignore_errors=True)
        self._started = False

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- broker faults ---------------------------------------------------------------------
    def kill(self, broker_id: int) -> None:
        """SIGKILL a broker: no clean shutdown, its logs recover on restart."""
        broker = self._broker(broker_id)
        if broker.running:
            broker.proc.kill()
        self._reap(broker)
        broker.paused = False

    def restart(self, broker_id: int) -> None:
        """Start a broker again on the same port and data; stop it cleanly first if running."""
        broker = self._broker(broker_id)
        if broker.running:
            _terminate(broker)
            self._reap(broker)
        self._spawn(broker)
        self._save()
        self.wait_until_ready()

    def pause(self, broker_id: int) -> None:
        """SIGSTOP a broker: it holds its sockets but answers nothing (a GC pause, a hung VM)."""
        broker = self._broker(broker_id)
        if broker.running:
            _stop(broker)

    def resume(self, broker_id: int) -> None:
        """SIGCONT a paused broker."""
        broker = self._broker(broker_id)
        if broker.running:
            broker.proc.send_signal(signal.SIGCONT)
        broker.paused = False

    def isolate(self, broker_id: int) -> None:
        """Cut a broker off from its peers and the controller; clients can still reach it."""
        self._fault(broker_id, "isolate")

    def heal(self, broker_id: int) -> None:
        """Reconnect an isolated broker to its peers and the controller."""
        self._fault(broker_id, "heal")

    def _fault(self, broker_id: int, action: str) -> None:
        broker = self._broker(broker_id)
        if not broker.answering:
            raise ClusterError(f"broker {broker_id} is not running")
        request = urllib.request.Request(
            f"http://{self.host}:{broker.admin_port}/v1/faults/{action}", method="POST", data=b"",
            headers=self.admin_headers())
        with urllib.request.urlopen(request, timeout=ADMIN_TIMEOUT_S):  # noqa: S310 (loopback)
            pass

    # -- controllers -----------------------------------------------------------------------
    @property
    def controllers(self) -> list[int]:
        """The controller ids, 1..M."""
        return sorted(self._controllers)

    @property
    def controller(self) -> _Node:
        """The active controller's process record as last found (or any running one, or the
        first)."""
        hinted = self._controllers.get(self._active_hint or 0)
        if hinted is not None and hinted.answering:
            return hinted
        return next((c for c in self._controllers.values() if c.running),
                    self._controllers[min(self._controllers)])

    def controller_states(self) -> dict[int, str]:
        """Each controller's state: up, paused or down."""
        return {i: c.state for i, c in sorted(self._controllers.items())}

    def controller_pids(self) -> dict[int, int]:
        return {i: c.proc.pid for i, c in self._controllers.items() if c.running}

    def active_controller(self) -> int | None:
        """The id of the active controller (the Raft leader whose epoch has begun), or None."""
        return self._find_active()

    def kill_controller(self, controller_id: int | None = None) -> int:
        """SIGKILL a controller (by default the active one) and return its id. Brokers keep
        serving with the metadata they have; a majority of the others elect a new leader."""
        node = self._controller_to_stop(controller_id)
        node.proc.kill()
        self._reap(node)
        node.paused = False
        return node.node_id

    def pause_controller(self, controller_id: int | None = None) -> int:
        """SIGSTOP a controller (by default the active one) and return its id: it holds its
        sockets but answers nothing; past the Raft fetch timeout the others elect a leader,
        and on resume it still believes it leads until it hears of the newer epoch."""
        node = self._controller_to_stop(controller_id)
        if node.paused:
            raise ClusterError(f"{node.name} is already paused")
        _stop(node)
        return node.node_id

    def resume_controller(self, controller_id: int | None = None) -> None:
        """SIGCONT a paused controller (by default every paused one)."""
        ids = [i for i, c in self._controllers.items() if c.paused]
        for node in self._controllers_named(controller_id, ids):
            if not node.running:
                raise ClusterError(f"{node.name} is not running")
            node.proc.send_signal(signal.SIGCONT)
            node.paused = False

    def restart_controller(self, controller_id: int | None = None) -> None:
        """Start a controller again on its ports and data (it replays its log); stop it cleanly
        first if running. By default: every controller that is down (kill_controller() then
        restart_controller() brings back the one killed), or if none is, the active one."""
        down = [i for i, c in self._controllers.items() if not c.running]
        if controller_id is None and not down:
            controller_id = self._require_active()
        for node in self._controllers_named(controller_id, down):
            if node.running:
                _terminate(node)
                self._reap(node)
            node.paused = False
            self._spawn(node)
        self._save()
        self.wait_until_ready()

    def isolate_controller(self, controller_id: int | None = None) -> int:
        """Cut a controller (by default the active one) off from the other voters, both ways;
        brokers still reach it. A leader cut off resigns once it misses a majority's fetches
        (Raft's check-quorum), and the others elect a new one. Returns its id."""
        node = self._controller_to_stop(controller_id)
        self._set_isolated(node, True)
        return node.node_id

    def heal_controller(self, controller_id: int | None = None) -> None:
        """Reconnect an isolated controller (by default every one) to the other voters."""
        ids = [i for i, c in self._controllers.items() if c.answering]
        for node in self._controllers_named(controller_id, ids):
            if not node.answering:
                raise ClusterError(f"{node.name} is {node.state}")
            self._set_isolated(node, False)

    def _set_isolated(self, node: _Node, isolated: bool) -> None:
        from pylog_nb.broker.controller.rpc import call_once

        if node.paused:
            raise ClusterError(f"{node.name} is paused")
        call_once(self.host, node.port, "set_isolated", isolated=isolated,
                  timeout_s=DESCRIBE_TIMEOUT_S, token=self.controller_token)

    def controller_views(self) -> dict[int, tuple[str, dict | None]]:
        """Each controller's state (up, paused, isolated or down) and, if it answers, its view
        of the quorum: role, leader, epoch, committed offset, each voter's lag (on the leader)."""
        views: dict[int, tuple[str, dict | None]] = {}
        for controller_id, node in sorted(self._controllers.items()):
            described = self._describe(node, quorum_only=True) if node.answering else None
            quorum = None if described is None else described["quorum"]
            state = node.state if quorum is None else (
                "isolated" if quorum.get("isolated") else "up")
            views[controller_id] = (state, quorum)
        return views

    def elect_preferred_leaders(self) -> dict:
        """Move leadership back to each partition's first replica where it is in the ISR
        (asks the active controller, following a failover)."""
        from pylog_nb.broker.controller.rpc import call_active

        addresses = [(self.host, c.port) for c in self._controllers.values() if c.answering]
        if not addresses:
            raise ClusterError(f"no controller is answering (controllers "
                               f"{self.controller_states()})")
        return call_active(addresses, "elect_preferred_leaders", token=self.controller_token)

    def set_client_quota(self, user: str | None = None, client_id: str | None = None,
                         **rates: float | None) -> None:
        """Set (a number) or remove (None) byte-rate quotas of a user and/or client id, as
        ``kafka-configs.sh --alter --entity-type users`` does: e.g.
        ``set_client_quota(user="greedy", producer_byte_rate=100_000)``. ``"<default>"`` names
        the default user or client id."""
        from pylog_nb.broker.controller.rpc import call_active

        entity = [[kind, None if name == "<default>" else name]
                  for kind, name in (("user", user), ("client-id", client_id)) if name]
        if not entity or not rates:
            raise ClusterError("name a user or client id, and rates such as "
                               "producer_byte_rate=100000")
        ops = [{"key": key, "value": float(value or 0), "remove": value is None}
               for key, value in rates.items()]
        addresses = [(self.host, c.port) for c in self._controllers.values() if c.answering]
        answer = call_active(addresses, "alter_client_quotas", token=self.controller_token,
                             entries=[{"entity": entity, "ops": ops}], validate_only=False)
        refused = [e for e in answer["entries"] if e["error_code"]]
        if refused:
            raise ClusterError(f"quota refused: {refused[0]['error_message']}")

    def controller_describe(self) -> dict:
        """The active controller's image (brokers, topics, partitions), its recent events and
        its view of the quorum. ConnectionError when no controller is active (a failover)."""
        found = self._describe_active()
        if found is None:
            raise ConnectionError(f"no controller is active (controllers "
                                  f"{self.controller_states()})")
        return found[1]

    def _describe_active(self) -> tuple[int, dict] | None:
        """(id, describe) of the controller that is active at the highest epoch, or None."""
        active = self._find_active()
        if active is None:
            return None
        described = self._describe(self._controllers[active])
        return None if described is None else (active, described)

    def _find_active(self) -> int | None:
        """The controller active at the highest epoch (asking each for its quorum view only:
        a whole describe carries the image, which a live view would fetch three times a
        second for nothing)."""
        claims: list[tuple[int, int]] = []
        for node in self._controllers.values():
            described = self._describe(node, quorum_only=True) if node.answering else None
            if described is not None and (epoch := _leader_epoch(described)) is not None:
                claims.append((epoch, node.node_id))
        if not claims:
            return None
        _epoch, self._active_hint = max(claims)
        return self._active_hint

    def _describe(self, node: _Node, quorum_only: bool = False) -> dict | None:
        from pylog_nb.broker.controller.rpc import ControllerRpcError, call_once

        method = "describe_quorum" if quorum_only else "describe"
        try:
            return call_once(self.host, node.port, method, timeout_s=DESCRIBE_TIMEOUT_S,
                             token=self.controller_token)
        except (OSError, ValueError, ControllerRpcError):  # down, starting, wedged
            return None

    def _require_active(self) -> int:
        active = self.active_controller()
        if active is None:
            raise ClusterError(f"no controller is active (controllers "
                               f"{self.controller_states()})")
        return active

    def _controller_to_stop(self, controller_id: int | None) -> _Node:
        """The controller a kill or pause acts on: the one named, or the active one."""
        if controller_id is None:
            controller_id = self._require_active()
        node = self._controller(controller_id)
        if not node.running:
            raise ClusterError(f"{node.name} is not running")
        return node

    def _controllers_named(self, controller_id: int | None, default: list[int]) -> list[_Node]:
        ids = default if controller_id is None else [controller_id]
        return [self._controller(i) for i in sorted(ids)]

    def _controller(self, controller_id: int) -> _Node:
        if controller_id not in self._controllers:
            raise ClusterError(f"no controller {controller_id}; controllers are "
                               f"{self.controllers}")
        return self._controllers[controller_id]

    def events(self) -> list[dict]:
        """Cluster events, oldest first: the active controller's (fenced, elected, ISR
        committed) and each broker's (HW advanced, ISR change requested, truncated), each with
        ``source``. Without an active controller, the brokers' alone."""
        merged = []
        found = self._describe_active()
        if found is not None:
            for event in found[1].get("events", []):
                merged.append({"source": "controller", **event})
        for broker_id, url in self.admin_urls().items():
            for event in self.admin_get(f"{url}/v1/events"):
                merged.append({"source": f"broker-{broker_id}", **event})
        return sorted(merged, key=lambda e: e["now_ms"])

    # -- introspection ---------------------------------------------------------------------
    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{self.host}:{b.port}" for b in self.brokers.values())

    def broker_pids(self) -> dict[int, int]:
        return {i: b.proc.pid for i, b in self.brokers.items() if b.running}

    def is_running(self, broker_id: int) -> bool:
        return self._broker(broker_id).running

    def admin_urls(self) -> dict[int, str]:
        """Each answering (running, not paused) broker's introspection endpoint."""
        return {i: f"http://{self.host}:{b.admin_port}" for i, b in self.brokers.items()
                if b.answering}

    def admin_get(self, url: str, timeout_s: float = ADMIN_TIMEOUT_S) -> Any:
        """GET one of this cluster's admin endpoints (with its token), as parsed JSON."""
        return _get_json(url, self.admin_headers(), timeout_s)

    def admin_headers(self) -> dict[str, str]:
        """The Authorization header its admin endpoints want ({} without security)."""
        if self.secrets is None:
            return {}
        return {"Authorization": f"Bearer {self.secrets.admin_http_token}"}

    def broker_states(self) -> dict[int, str]:
        """Each broker's state as a fault-injecting user sees it: up, paused, isolated or down."""
        return {broker_id: state for broker_id, (state, _view) in self.broker_views().items()}

    def broker_views(self) -> dict[int, tuple[str, dict | None]]:
        """Each broker's state (as ``broker_states``) and, if it answers, what it says of itself
        (``GET /v1/broker``: lifecycle, traffic counters since it started)."""
        views: dict[int, tuple[str, dict | None]] = {}
        for broker_id, broker in sorted(self.brokers.items()):
            if not broker.answering:
                views[broker_id] = (broker.state, None)
            else:
                view = self.admin_get(f"http://{self.host}:{broker.admin_port}/v1/broker")
                views[broker_id] = ("isolated" if view.get("isolated") else "up", view)
        return views

    def describe(self) -> dict[int, list[dict]]:
        """Per broker, every hosted partition: leader, epoch, ISR, log start, HW, LEO, segments."""
        return {i: self.admin_get(f"{url}/v1/partitions") for i, url in self.admin_urls().items()}

    def groups(self) -> list[dict]:
        """Every consumer group, from the broker coordinating it: state, members and what each
        is assigned, committed offsets (``GET /v1/groups``; "coordinator" names the broker)."""
        return [{**group, "coordinator": broker_id}
                for broker_id, url in self.admin_urls().items()
                for group in self.admin_get(f"{url}/v1/groups")]

    def connections(self) -> dict[int, dict]:
        """Per answering broker, its live client connections (``GET /v1/connections``): peer,
        principal, SASL mechanism, client id and software, requests served; the brokers' own
        connections to each other have ``role`` "broker"."""
        return {i: self.admin_get(f"{url}/v1/connections")
                for i, url in self.admin_urls().items()}

    # -- internals -------------------------------------------------------------------------
    def _broker(self, broker_id: int) -> _Node:
        if broker_id not in self.brokers:
            raise ClusterError(f"no broker {broker_id}; brokers are {sorted(self.brokers)}")
        return self.brokers[broker_id]

    def _nodes(self) -> list[_Node]:
        return [*self._controllers.values(), *self.brokers.values()]

    def _command(self, node: _Node, ready_w: int) -> list[str]:
        common = ["--data-dir", str(node.data_dir), "--host", self.host,
                  "--port", str(node.port), "--ready-fd", str(ready_w),
                  "--parent-fd", str(self._parent_r)]
        if node.kind == "controller":
            return [sys.executable, "-m", "pylog_nb.broker.controller", *common,
                    "--node-id", str(node.node_id), "--voters", self._voters(),
                    *self._secrets_args()]
        addresses = ",".join(f"{self.host}:{c.port}" for c in self._controllers.values())
        return [sys.executable, "-m", "pylog_nb.broker", "--broker-id", str(node.node_id),
                "--admin-port", str(node.admin_port), *common, "--controller", addresses,
                *self._broker_security_args(), *self.broker_args]

    def _broker_security_args(self) -> list[str]:
        if self.secrets is None:
            return []
        args = ["--security-protocol", self.security_protocol, "--authorizer",
                *self._secrets_args()]
        if self.tls_files is not None:
            args += ["--ssl-certfile", str(self.tls_files.cert),
                     "--ssl-keyfile", str(self.tls_files.key),
                     "--ssl-cafile", str(self.tls_files.ca)]
        return args

    def _secrets_args(self) -> list[str]:
        if self.secrets is None:
            return []
        return ["--secrets", str(self.data_dir / secrets.SECRETS_FILE)]

    def _voters(self) -> str:
        """Every controller as ID@HOST:RAFT_PORT, the static voter set of the quorum."""
        return ",".join(f"{i}@{self.host}:{c.raft_port}"
                        for i, c in sorted(self._controllers.items()))

    def _pick_controller_ports(self) -> None:
        """Free RPC and Raft ports for every controller that has none saved."""
        missing = [c for c in self._controllers.values() if not (c.port and c.raft_port)]
        ports = _free_ports(self.host, 2 * len(missing))
        for node in missing:
            node.port, node.raft_port = ports.pop(), ports.pop()

    def _spawn(self, node: _Node) -> None:
        self._await_started(node, self._launch(node))

    def _spawn_all(self, nodes: list[_Node]) -> None:
        """Start every node at once (brokers retry until a controller is active), then wait
        for each to listen; if one fails, stop the others."""
        launched = [(node, self._launch(node)) for node in nodes]
        try:
            for node, ready_r in launched:
                self._await_started(node, ready_r)
        except ClusterError:
            for node, _ in launched:
                if node.running:
                    _terminate(node)
                    self._reap(node)
            raise

    def _launch(self, node: _Node) -> int:
        """Start ``node``'s process; the pipe it writes its ports to once listening."""
        node.data_dir.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
        ready_r, ready_w = os.pipe()
        command = self._command(node, ready_w)
        log_fd = os.open(node.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, PRIVATE_FILE_MODE)
        with open(log_fd, "ab") as log_file:
            node.process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                pass_fds=(ready_w, self._parent_r),
                start_new_session=True,  # Ctrl+C reaches the supervisor, which stops them
                umask=PRIVATE_UMASK,  # what the node creates is its owner's alone
            )
        os.close(ready_w)
        return ready_r

    def _await_started(self, node: _Node, ready_r: int) -> None:
        try:
            ports = self._await_ready(node, ready_r)
        finally:
            os.close(ready_r)
        node.port = ports[0]
        if node.kind == "broker":
            node.admin_port = ports[1]

    def _await_ready(self, node: _Node, ready_r: int) -> tuple[int, int]:
        deadline = time.monotonic() + READY_TIMEOUT_S
        received = b""
        while not received.endswith(b"\n"):
            remaining_s = deadline - time.monotonic()
            # poll, not select: a kernel with over 1024 open files must still start a cluster
            poller = select.poll()
            poller.register(ready_r, select.POLLIN)
            if not poller.poll(max(0, int(remaining_s * 1000))):
                node.proc.kill()
                raise ClusterError(f"{node.name} not ready after {READY_TIMEOUT_S:.0f}s; "
                                   f"log: {self._log_tail(node)}")
            chunk = os.read(ready_r, 64)
            if not chunk:
                node.proc.wait()
                raise ClusterError(f"{node.name} exited during start-up; "
                                   f"log: {self._log_tail(node)}")
            received += chunk
        fields = received.split()
        return int(fields[0]), int(fields[1]) if len(fields) > 1 else 0

    def _reap(self, node: _Node) -> None:
        if node.process is None:
            return
        try:
            node.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            node.process.kill()
            node.process.wait()

    def _log_tail(self, node: _Node) -> str:
        try:
            data = node.log_path.read_bytes()[-LOG_TAIL_BYTES:]
        except OSError:
            return "(no log)"
        return data.decode("utf-8", "replace").strip().splitlines()[-1:][0] if data else "(empty)"

    def _load(self) -> dict:
        path = self.data_dir / CLUSTER_FILE
        return json.loads(path.read_text()) if path.exists() else {}

    def _load_ports(self) -> None:
        saved = self._load()
        for broker_id, node in self.brokers.items():
            recorded = self._broker_node(broker_id, saved)
            node.port, node.admin_port = recorded.port, recorded.admin_port
        for controller_id, node in self._controllers.items():
            recorded = self._controller_node(controller_id, saved)
            node.port, node.raft_port = recorded.port, recorded.raft_port

    def _broker_node(self, broker_id: int, saved: dict) -> _Node:
        # _save writes each broker as [port, admin_port]
        port, admin_port = saved.get("ports", {}).get(str(broker_id), (0, 0))
        return _Node("broker", broker_id, self.data_dir / f"broker-{broker_id}", port, admin_port)

    def _controller_node(self, controller_id: int, saved: dict) -> _Node:
        ports = saved.get("controllers", {}).get(str(controller_id), {})
        return _Node("controller", controller_id, self.data_dir / f"controller-{controller_id}",
                     port=ports.get("port", 0), raft_port=ports.get("raft_port", 0))

    def _save(self) -> None:
        """Ports and pids: brokers under "ports" and "pids", controllers under "controllers";
        the brokers' listener under "security_protocol"."""
        ports = {b.node_id: [b.port, b.admin_port] for b in self.brokers.values()}
        pids = {b.node_id: b.proc.pid for b in self.brokers.values() if b.running}
        controllers = {c.node_id: {"port": c.port, "raft_port": c.raft_port,
                                   "pid": c.proc.pid if c.running else None}
                       for c in self._controllers.values()}
        path = self.data_dir / CLUSTER_FILE
        text = json.dumps({"ports": ports, "pids": pids, "controllers": controllers,
                           "security_protocol": self.security_protocol})
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE_MODE),
                  "w") as file:
            file.write(text)


def _controllers_for(brokers: int) -> int:
    """The default quorum size: three, or one for a cluster of one or two brokers (a quorum of
    three controllers would outnumber them)."""
    return CONTROLLERS_DEFAULT if brokers >= CONTROLLERS_DEFAULT else 1


def _leader_epoch(described: dict) -> int | None:
    """The epoch a controller's describe claims to be the active controller at, or None. A
    Raft leader is active once its epoch's first batch is committed (it then decides)."""
    quorum = described["quorum"]
    return quorum["epoch"] if quorum["active"] else None


def _free_ports(host: str, count: int) -> list[int]:
    """``count`` distinct ports free on ``host`` now (all held open until all are read)."""
    with contextlib.ExitStack() as stack:
        probes = [stack.enter_context(socket.socket()) for _ in range(count)]
        for probe in probes:
            probe.bind((host, 0))
        return [probe.getsockname()[1] for probe in probes]


def _stop(node: _Node) -> None:
    """SIGSTOP, returning once the kernel shows the process stopped: a busy machine may run it a
    while longer, and whoever looks next (another process's start()) must see it paused."""
    node.proc.send_signal(signal.SIGSTOP)
    node.paused = True
    deadline = time.monotonic() + STOPPED_WAIT_S
    while not is_paused(node.proc.pid) and time.monotonic() < deadline:
        time.sleep(READY_POLL_S)


def _terminate(node: _Node) -> None:
    """SIGTERM, after SIGCONT if paused: a stopped process would sit on it."""
    if node.paused:
        node.proc.send_signal(signal.SIGCONT)
        node.paused = False
    node.proc.send_signal(signal.SIGTERM)


def _stop_at_exit(ref: weakref.ref) -> None:
    """At interpreter exit: stop a still-running cluster with a temporary data directory, which
    stops its processes cleanly and removes the directory."""
    cluster = ref()
    if cluster is not None and cluster._started:
        cluster.stop()


def _get_json(url: str, headers: dict[str, str], timeout_s: float) -> Any:  # parsed JSON
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 (loopback)
        return json.loads(response.read())


def _is_pylog_process(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return b"pylog_nb.broker" in cmdline.read()
    except OSError:
        return False


def _is_alive_pylog_process(pid: int) -> bool:
    """True until the process is a zombie or gone. An exiting process drops its cmdline before
    it becomes a zombie, so an empty cmdline alone does not mean its parent can reap it yet."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    if state in (b"Z", b"X", b"x"):
        return False
    return _is_pylog_process(pid) or _cmdline_is_empty(pid)


def _cmdline_is_empty(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return cmdline.read() == b""
    except OSError:
        return False


class _AttachedProcess:
    """A broker or controller started by another LocalCluster: signalled by pid, not reaped."""

    POLL_S = 0.05

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def poll(self) -> int | None:
        return None if _is_alive_pylog_process(self.pid) else 0

    def send_signal(self, sig: int) -> None:
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                assert timeout is not None  # deadline is set only with a timeout
                raise subprocess.TimeoutExpired(str(self.pid), timeout)
            time.sleep(self.POLL_S)
        return 0
