"""The faults a view's buttons inject, and when each is refused.

``LocalCluster``'s fault methods are lenient (a second kill of a dead broker does nothing and
returns), which is right for scripts and wrong for a button: "kill broker 2: done" about a
broker that was already down tells the user something false. So every action is checked
against the broker's state as the supervisor knows it now (not the last snapshot, which may be
a second old), and one that cannot apply is refused with the reason. A controller's buttons
follow the same rules, checked against ``LocalCluster.controller_views`` (up, paused, isolated
or down) and applied by the ``*_controller`` methods.
"""

from __future__ import annotations

from ..cluster import ClusterError, LocalCluster

ACTIONS = ("kill", "restart", "pause", "resume", "isolate", "heal")
STATES = ("up", "paused", "isolated", "down")  # LocalCluster.broker_states()

# What each action does, for the buttons' tooltips and the legend.
ACTION_HELP = {
    "kill": "SIGKILL: the process dies at once, no clean shutdown; its log recovers on restart",
    "restart": "start the broker again on the same port and data (stops it cleanly if running)",
    "pause": "SIGSTOP: the process freezes holding its sockets, like a long GC pause",
    "resume": "SIGCONT: a paused broker runs on, still believing what it believed",
    "isolate": "cut the broker off from its peers and the controller; clients still reach it",
    "heal": "reconnect an isolated broker to its peers and the controller",
}
CONTROLLER_ACTION_HELP = {
    "kill": "SIGKILL: the controller dies at once; if it was active, a majority of the others "
            "elect a new one and brokers follow it",
    "restart": "start the controller again on its ports and data: it replays its metadata log "
               "and rejoins the quorum (stops it cleanly if running)",
    "pause": "SIGSTOP: the controller freezes holding its sockets; past the Raft fetch timeout "
             "the others elect a leader, and on resume it still believes what it believed",
    "resume": "SIGCONT: a paused controller runs on until it hears of a newer epoch",
    "isolate": "cut the controller off from the other voters, both ways; brokers still reach "
               "it. An active one resigns once it misses a majority's fetches",
    "heal": "reconnect an isolated controller to the other voters",
}


def refusal(action: str, node_id: int, state: str, kind: str = "broker") -> str:
    """Why ``action`` cannot apply to ``kind`` (broker or controller) ``node_id`` in ``state``;
    "" when it can."""
    assert action in ACTIONS, action
    assert state in STATES, state
    assert kind in ("broker", "controller"), kind
    name = f"{kind} {node_id}"
    if action == "kill" and state == "down":
        return f"{name} is already down"
    if action == "restart" and state == "paused":
        return f"{name} is paused: resume it first, or kill it"
    if action == "pause" and state in ("down", "paused"):
        return f"{name} is already {state}"
    if action == "resume" and state != "paused":
        return f"{name} is not paused (it is {state})"
    if action == "isolate" and state != "up":
        if state == "isolated":
            return f"{name} is already isolated"
        return f"{name} is {state}: only a running {kind} can be cut off"
    if action == "heal" and state != "isolated":
        return f"{name} is not isolated (it is {state})"
    return ""


def apply(cluster: LocalCluster, action: str, broker_id: int) -> tuple[str, str]:
    """Inject ``action`` into broker ``broker_id`` unless it is refused: the outcome ("done",
    "refused" or "failed") and one line saying what happened."""
    assert action in ACTIONS, action
    if broker_id not in cluster.brokers:
        return "refused", f"{action} refused: no broker {broker_id}"
    try:
        state = cluster.broker_states()[broker_id]
        reason = refusal(action, broker_id, state)
        if reason:
            return "refused", f"{action} refused: {reason}"
        getattr(cluster, action)(broker_id)
    except (ClusterError, OSError) as error:
        return "failed", f"{action} broker {broker_id} failed: {error}"
    return "done", f"{action} broker {broker_id}: done"


def apply_to_controller(cluster: LocalCluster, action: str,
                        controller_id: int) -> tuple[str, str]:
    """Inject ``action`` into controller ``controller_id`` unless it is refused: the outcome
    ("done", "refused" or "failed") and one line saying what happened."""
    from pylog_nb.broker.controller.rpc import ControllerRpcError  # isolate and heal ask it

    assert action in ACTIONS, action
    name = f"controller {controller_id}"
    if controller_id not in cluster.controllers:
        return "refused", f"{action} refused: no {name}" + (
            "" if cluster.controllers else " (this cluster has no controller process)")
    try:
        state = cluster.controller_views()[controller_id][0]
        reason = refusal(action, controller_id, state, "controller")
        if reason:
            return "refused", f"{action} refused: {reason}"
        getattr(cluster, f"{action}_controller")(controller_id)
    except (ClusterError, OSError, ValueError, ControllerRpcError) as error:
        return "failed", f"{action} {name} failed: {error}"
    return "done", f"{action} {name}: done"
