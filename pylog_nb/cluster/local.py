"""LocalCluster: start, signal and stop broker processes on loopback.

Theory of operation: every broker is a separate ``python -m pylog_nb.broker`` process with its
own directory ``<data_dir>/broker-<id>/``. The supervisor holds the write end of one pipe whose
read end every broker watches: when the supervisor dies for any reason the kernel closes the
pipe and each broker shuts down cleanly, so no orphans survive a kernel restart. A broker reports
readiness by writing its bound port to a second, per-start pipe once its logs are recovered and
it listens. Ports are kept in ``cluster.json`` so a restart comes back on the same address.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

READY_TIMEOUT_S = 60.0  # recovery of a large log can take a while
READY_POLL_S = 0.05
BROKERS_MAX = 9
STOP_TIMEOUT_S = 10.0
LOG_TAIL_BYTES = 2000
CLUSTER_FILE = "cluster.json"


class ClusterError(RuntimeError):
    """A broker could not be started or controlled; the message says why in one line."""


@dataclass
class _Broker:
    broker_id: int
    data_dir: Path
    port: int
    admin_port: int = 0
    process: subprocess.Popen[bytes] | _AttachedProcess | None = None

    @property
    def log_path(self) -> Path:
        return self.data_dir / "broker.log"

    @property
    def proc(self) -> subprocess.Popen[bytes] | _AttachedProcess:
        """The process, once started or attached (callers check ``running`` first)."""
        assert self.process is not None, f"broker {self.broker_id} was never started"
        return self.process

    paused: bool = False

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def answering(self) -> bool:
        return self.running and not self.paused


class LocalCluster:
    """Broker processes on 127.0.0.1 sharing one data directory.

    >>> with LocalCluster(brokers=1) as cluster:
    ...     print(cluster.bootstrap_servers)
    """

    def __init__(
        self,
        brokers: int = 1,
        data_dir: str | Path | None = None,
        host: str = "127.0.0.1",
        broker_args: tuple[str, ...] = (),
    ) -> None:
        if not 1 <= brokers <= BROKERS_MAX:
            raise ClusterError(f"brokers must be between 1 and {BROKERS_MAX}, got {brokers}")
        self._temporary = data_dir is None
        self.data_dir = Path(tempfile.mkdtemp(prefix="pylog-") if data_dir is None else data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.host = host
        self.broker_args = tuple(broker_args)
        ports = self._load_ports()
        self.brokers = {
            i: _Broker(i, self.data_dir / f"broker-{i}", *ports.get(i, (0, 0)))
            for i in range(1, brokers + 1)
        }
        self._parent_r, self._parent_w = os.pipe()
        self._started = False
        # One broker runs on its own; several follow a controller process (KRaft's shape).
        self.controller: _Broker | None = None
        if brokers > 1:
            self.controller = _Broker(0, self.data_dir / "controller", ports.get(0, (0, 0))[0])

    def __repr__(self) -> str:
        state = "running" if self._started else "stopped"
        servers = self.bootstrap_servers if self._started else ""
        return (f"LocalCluster(brokers={len(self.brokers)}, {state}, "
                f"bootstrap_servers={servers!r}, data_dir={str(self.data_dir)!r})")

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> LocalCluster:
        """Start the controller and every broker; wait until all serve a full cluster view.

        If this data directory's cluster is already running (a notebook cell run twice), attach
        to it instead of starting a duplicate.
        """
        if self._attach():
            self._started = True
            return self
        if self.controller is not None:
            self._spawn(self.controller)
        for broker in self.brokers.values():
            self._spawn(broker)
        self._save_ports()
        self._started = True
        if self._temporary:  # a kernel that exits without stop() leaves no /tmp/pylog-* behind
            atexit.register(_stop_at_exit, weakref.ref(self))
        self.wait_until_ready()
        return self

    def wait_until_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Wait until every running broker is registered, unfenced and sees all live peers."""
        if self.controller is None:
            return
        running = {i for i, b in self.brokers.items() if b.answering}
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._cluster_view_complete(running):
                return
            time.sleep(READY_POLL_S)
        raise ClusterError(f"brokers {sorted(running)} did not all join within {timeout_s:.0f}s")

    def _cluster_view_complete(self, running: set[int]) -> bool:
        try:
            views = [_get_json(f"{url}/v1/broker") for url in self.admin_urls().values()]
        except OSError:
            return False
        return all(set(v["live_brokers"]) >= running for v in views)

    def stop(self) -> None:
        """Stop every broker cleanly (SIGTERM, then SIGKILL after a grace period)."""
        for broker in self.brokers.values():
            if broker.running:
                broker.proc.send_signal(signal.SIGTERM)
        for broker in self.brokers.values():
            self._reap(broker)
        if self.controller is not None and self.controller.running:
            self.controller.proc.send_signal(signal.SIGTERM)
            self._reap(self.controller)
        if self._parent_w >= 0:
            os.close(self._parent_w)
            os.close(self._parent_r)
            self._parent_w = self._parent_r = -1
        if self._temporary:
            shutil.rmtree(self.data_dir, ignore_errors=True)
        self._started = False

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- faults ----------------------------------------------------------------------------
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
            broker.proc.send_signal(signal.SIGTERM)
            self._reap(broker)
        self._spawn(broker)
        self._save_ports()
        self.wait_until_ready()

    def pause(self, broker_id: int) -> None:
        """SIGSTOP a broker: it holds its sockets but answers nothing (a GC pause, a hung VM)."""
        broker = self._broker(broker_id)
        if broker.running:
            broker.proc.send_signal(signal.SIGSTOP)
            broker.paused = True

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
            f"http://{self.host}:{broker.admin_port}/v1/faults/{action}", method="POST", data=b"")
        with urllib.request.urlopen(request, timeout=ADMIN_TIMEOUT_S):  # noqa: S310 (loopback)
            pass

    def kill_controller(self) -> None:
        """SIGKILL the controller; brokers keep serving with the metadata they have."""
        if self.controller is not None and self.controller.running:
            self.controller.proc.kill()
            self._reap(self.controller)

    def restart_controller(self) -> None:
        """Start the controller again on its port; it replays its metadata log."""
        if self.controller is None:
            raise ClusterError("a one-broker cluster has no controller process")
        if self.controller.running:
            self.controller.proc.send_signal(signal.SIGTERM)
            self._reap(self.controller)
        self._spawn(self.controller)
        self._save_ports()
        self.wait_until_ready()

    def events(self) -> list[dict]:
        """Cluster events, oldest first: the controller's (fenced, elected, ISR committed) and
        each broker's (HW advanced, ISR change requested, truncated), each with ``source``."""
        merged = []
        if self.controller is not None and self.controller.answering:
            for event in self.controller_describe().get("events", []):
                merged.append({"source": "controller", **event})
        for broker_id, url in self.admin_urls().items():
            for event in _get_json(f"{url}/v1/events"):
                merged.append({"source": f"broker-{broker_id}", **event})
        return sorted(merged, key=lambda e: e["now_ms"])

    def elect_preferred_leaders(self) -> dict:
        """Move leadership back to each partition's first replica where it is in the ISR."""
        if self.controller is None:
            raise ClusterError("a one-broker cluster has no controller process")
        from pylog_nb.broker.controller.rpc import call_once

        return call_once(self.host, self.controller.port, "elect_preferred_leaders")

    def controller_describe(self) -> dict:
        """The controller's image (brokers, topics, partitions) and its recent events."""
        if self.controller is None:
            raise ClusterError("a one-broker cluster has no controller process")
        from pylog_nb.broker.controller.rpc import call_once

        return call_once(self.host, self.controller.port, "describe")

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

    def broker_states(self) -> dict[int, str]:
        """Each broker's state as a fault-injecting user sees it: up, paused, isolated or down."""
        return {broker_id: state for broker_id, (state, _view) in self.broker_views().items()}

    def broker_views(self) -> dict[int, tuple[str, dict | None]]:
        """Each broker's state (as ``broker_states``) and, if it answers, what it says of itself
        (``GET /v1/broker``: lifecycle, traffic counters since it started)."""
        views: dict[int, tuple[str, dict | None]] = {}
        for broker_id, broker in sorted(self.brokers.items()):
            if not broker.running:
                views[broker_id] = ("down", None)
            elif broker.paused:
                views[broker_id] = ("paused", None)
            else:
                view = _get_json(f"http://{self.host}:{broker.admin_port}/v1/broker")
                views[broker_id] = ("isolated" if view.get("isolated") else "up", view)
        return views

    def describe(self) -> dict[int, list[dict]]:
        """Per broker, every hosted partition: leader, epoch, ISR, log start, HW, LEO, segments."""
        return {i: _get_json(f"{url}/v1/partitions") for i, url in self.admin_urls().items()}

    def groups(self) -> list[dict]:
        """Every consumer group, from the broker coordinating it: state, members and what each
        is assigned, committed offsets (``GET /v1/groups``; "coordinator" names the broker)."""
        return [{**group, "coordinator": broker_id}
                for broker_id, url in self.admin_urls().items()
                for group in _get_json(f"{url}/v1/groups")]

    # -- internals -------------------------------------------------------------------------
    def _broker(self, broker_id: int) -> _Broker:
        if broker_id not in self.brokers:
            raise ClusterError(f"no broker {broker_id}; brokers are {sorted(self.brokers)}")
        return self.brokers[broker_id]

    def _command(self, broker: _Broker, ready_w: int) -> list[str]:
        common = ["--data-dir", str(broker.data_dir), "--host", self.host,
                  "--port", str(broker.port), "--ready-fd", str(ready_w),
                  "--parent-fd", str(self._parent_r)]
        if broker is self.controller:
            return [sys.executable, "-m", "pylog_nb.broker.controller", *common]
        command = [sys.executable, "-m", "pylog_nb.broker", "--broker-id", str(broker.broker_id),
                   "--admin-port", str(broker.admin_port), *common, *self.broker_args]
        if self.controller is not None:
            command += ["--controller", f"{self.host}:{self.controller.port}"]
        return command

    def _spawn(self, broker: _Broker) -> None:
        broker.data_dir.mkdir(parents=True, exist_ok=True)
        ready_r, ready_w = os.pipe()
        command = self._command(broker, ready_w)
        with open(broker.log_path, "ab") as log_file:
            broker.process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                pass_fds=(ready_w, self._parent_r),
                start_new_session=True,  # Ctrl+C reaches the supervisor, which stops brokers
            )
        os.close(ready_w)
        try:
            broker.port, broker.admin_port = self._await_ready(broker, ready_r)
        finally:
            os.close(ready_r)

    def _await_ready(self, broker: _Broker, ready_r: int) -> tuple[int, int]:
        deadline = time.monotonic() + READY_TIMEOUT_S
        received = b""
        while not received.endswith(b"\n"):
            remaining_s = deadline - time.monotonic()
            # poll, not select: a kernel with over 1024 open files must still start a cluster
            poller = select.poll()
            poller.register(ready_r, select.POLLIN)
            if not poller.poll(max(0, int(remaining_s * 1000))):
                broker.proc.kill()
                raise ClusterError(f"broker {broker.broker_id} not ready after "
                                   f"{READY_TIMEOUT_S:.0f}s; log: {self._log_tail(broker)}")
            chunk = os.read(ready_r, 64)
            if not chunk:
                broker.proc.wait()
                raise ClusterError(f"broker {broker.broker_id} exited during start-up; "
                                   f"log: {self._log_tail(broker)}")
            received += chunk
        fields = received.split()
        return int(fields[0]), int(fields[1]) if len(fields) > 1 else 0

    def _reap(self, broker: _Broker) -> None:
        if broker.process is None:
            return
        try:
            broker.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            broker.process.kill()
            broker.process.wait()

    def _log_tail(self, broker: _Broker) -> str:
        try:
            data = broker.log_path.read_bytes()[-LOG_TAIL_BYTES:]
        except OSError:
            return "(no log)"
        return data.decode("utf-8", "replace").strip().splitlines()[-1:][0] if data else "(empty)"

    def _members(self) -> list[_Broker]:
        return [*([self.controller] if self.controller else []), *self.brokers.values()]

    def _attach(self) -> bool:
        """Adopt the running processes recorded in cluster.json, if every one is alive."""
        path = self.data_dir / CLUSTER_FILE
        if not path.exists():
            return False
        pids = {int(k): v for k, v in json.loads(path.read_text()).get("pids", {}).items()}
        members = self._members()
        if not members or any(not _is_pylog_process(pids.get(m.broker_id)) for m in members):
            return False
        for member in members:
            member.process = _AttachedProcess(pids[member.broker_id])
        self.wait_until_ready()
        return True

    def _load_ports(self) -> dict[int, tuple[int, int]]:
        path = self.data_dir / CLUSTER_FILE
        if not path.exists():
            return {}
        # _save_ports writes each entry as [port, admin_port]
        return {int(k): (v[0], v[1]) for k, v in json.loads(path.read_text())["ports"].items()}

    def _save_ports(self) -> None:
        ports = {b.broker_id: [b.port, b.admin_port] for b in self.brokers.values()}
        if self.controller is not None:
            ports[0] = [self.controller.port, 0]
        pids = {m.broker_id: m.proc.pid for m in self._members() if m.running}
        (self.data_dir / CLUSTER_FILE).write_text(json.dumps({"ports": ports, "pids": pids}))


ADMIN_TIMEOUT_S = 10.0


def _stop_at_exit(ref: weakref.ref) -> None:
    """At interpreter exit: stop a still-running cluster with a temporary data directory, which
    stops its brokers cleanly and removes the directory."""
    cluster = ref()
    if cluster is not None and cluster._started:
        cluster.stop()


def _get_json(url: str) -> Any:  # parsed JSON
    with urllib.request.urlopen(url, timeout=ADMIN_TIMEOUT_S) as response:  # noqa: S310 (loopback)
        return json.loads(response.read())


def _is_pylog_process(pid: int | None) -> bool:
    if pid is None:
        return False
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
