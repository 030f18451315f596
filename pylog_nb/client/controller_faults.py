"""Controller faults as a notebook asks for them: which controller, what came of it, in words.

``LocalCluster`` signals a controller process; this module chooses the one meant, refuses a
fault that cannot apply (in one line naming the controller and its state), and waits, bounded
and saying so, for the quorum to settle:

- kill, pause, isolate act on the active controller unless one is named. When the active one
  goes, the others elect a new one (Raft: within about 2 s); the answer names it, or says why
  none can be elected (too few voters left for a majority).
- resume, restart, heal act on every paused, down or isolated controller unless one is named
  (restart with none down: the active one, as ``LocalCluster.restart_controller``). The answer
  waits for each to follow the active controller again with its committed offset caught up.

Each function returns the lines to show, one per controller acted on; waits use the status line
of ``pylog_nb.client.status``.
"""

from __future__ import annotations

import time

from ..cluster import ClusterError, LocalCluster
from .introspect import active_controller_of
from .status import waiting

STOPS = ("kill", "pause", "isolate")  # by default on the active controller
RESTORES = ("resume", "restart", "heal")  # by default on every controller they undo
ACTIONS = (*STOPS, *RESTORES)
SETTLE_TIMEOUT_S = 30.0  # Raft elects within about 2 s; generous for a loaded laptop
POLL_S = 0.1

Views = dict[int, tuple[str, dict | None]]

# The state a restore undoes; restart undoes "down" by default but takes any state when named.
_UNDOES = {"resume": "paused", "heal": "isolated", "restart": "down"}


def controller_fault(cluster: LocalCluster, action: str, controller_id: int | None = None,
                     timeout_s: float = SETTLE_TIMEOUT_S) -> list[str]:
    """Apply ``action`` (one of ACTIONS) to controller ``controller_id``, or to the default
    ones; wait for the quorum to settle; return what happened, one line per controller.
    ClusterError, in one line, when the fault cannot apply."""
    if action not in ACTIONS:
        raise ValueError(f"{action!r} is not a controller fault: one of {', '.join(ACTIONS)}")
    if controller_id is not None and controller_id not in cluster.controllers:
        raise ClusterError(f"controller {controller_id} does not exist; controllers are "
                           f"{cluster.controllers}")
    views = cluster.controller_views()
    if action in STOPS:
        return [_stop(cluster, action, controller_id, views, timeout_s)]
    return _restore(cluster, action, controller_id, views, timeout_s)


# -- kill, pause, isolate ------------------------------------------------------------------------


def _stop(cluster: LocalCluster, action: str, controller_id: int | None, views: Views,
          timeout_s: float) -> str:
    active = active_controller_of(views)
    target = active if controller_id is None else controller_id
    if target is None:
        raise ClusterError(f"no controller is active ({_states(views)}): name one")
    _check_can_stop(action, target, views[target][0])
    with waiting(f"controller {target}: {action}…"):
        getattr(cluster, f"{action}_controller")(target)
    done = f"controller {target}: {action} done"
    if target != active:
        still = "no controller is active" if active is None else \
            f"controller {active} stays active"
        return f"{done} (not the active controller; {still})"
    voting = [i for i, (state, _quorum) in views.items() if state == "up" and i != target]
    majority = len(views) // 2 + 1
    if len(voting) < majority:
        return (f"{done} (it was the active controller; no other can be elected: "
                f"{_count(len(voting), 'other controller')} up, a majority is {majority})")
    new = _wait_for_takeover(cluster, target, timeout_s)
    if new is None:
        return (f"{done} (it was the active controller; no other took over within "
                f"{timeout_s:g} s)")
    controller_id, epoch = new
    return f"{done} (it was the active controller; controller {controller_id} took over, " \
           f"epoch {epoch})"


def _check_can_stop(action: str, controller_id: int, state: str) -> None:
    name = f"controller {controller_id}"
    if state == "down":
        raise ClusterError(f"{name} is already down" if action == "kill" else f"{name} is down")
    if action == "pause" and state == "paused":
        raise ClusterError(f"{name} is already paused")
    if action == "isolate" and state == "paused":
        raise ClusterError(f"{name} is paused: resume it first")
    if action == "isolate" and state == "isolated":
        raise ClusterError(f"{name} is already isolated")


def _wait_for_takeover(cluster: LocalCluster, gone: int,
                       timeout_s: float) -> tuple[int, int] | None:
    """(id, epoch) of the controller active in place of ``gone``, or None after ``timeout_s``."""
    others = [i for i in cluster.controllers if i != gone]
    with waiting(f"waiting for controllers {_ids(others)} to elect a new active controller "
                 f"(up to {timeout_s:g} s)…"):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            views = cluster.controller_views()
            active = active_controller_of(views)
            if active is not None and active != gone:
                quorum = views[active][1]
                assert quorum is not None
                return active, quorum["epoch"]
            time.sleep(POLL_S)
    return None


# -- resume, restart, heal -----------------------------------------------------------------------


def _restore(cluster: LocalCluster, action: str, controller_id: int | None, views: Views,
             timeout_s: float) -> list[str]:
    undone = _UNDOES[action]
    if controller_id is not None:
        state = views[controller_id][0]
        if action != "restart" and state != undone:
            raise ClusterError(f"controller {controller_id} is {state}, not {undone}")
        targets = [controller_id]
    else:
        targets = [i for i, (state, _quorum) in views.items() if state == undone]
        if not targets and action == "restart":
            active = active_controller_of(views)
            if active is None:
                raise ClusterError(f"no controller is down or active ({_states(views)})")
            targets = [active]
        if not targets:
            return [f"no controller is {undone}: nothing to do"]
    with waiting(f"{_names(targets)}: {action}…"):
        if action == "restart" and controller_id is None:
            # all at once: each restart waits for an active controller, which may need them all
            cluster.restart_controller()
        else:
            for target in targets:
                getattr(cluster, f"{action}_controller")(target)
    caught_up = _wait_for_followers(cluster, targets, timeout_s)
    return [f"controller {t}: {action} done ({caught_up[t]})" for t in targets]


def _wait_for_followers(cluster: LocalCluster, targets: list[int],
                        timeout_s: float) -> dict[int, str]:
    """Wait until each of ``targets`` follows the active controller with its committed offset
    caught up (or is the active one); say so for each, or what it lacks after ``timeout_s``."""
    with waiting(f"waiting for {_names(targets)} to follow the active controller and catch up "
                 f"(up to {timeout_s:g} s)…"):
        deadline = time.monotonic() + timeout_s
        while True:
            views = cluster.controller_views()
            standing = {t: _standing(t, views) for t in targets}
            if all(settled for settled, _text in standing.values()):
                return {t: text for t, (_settled, text) in standing.items()}
            if time.monotonic() >= deadline:
                return {t: text if settled else f"{text} after {timeout_s:g} s"
                        for t, (settled, text) in standing.items()}
            time.sleep(POLL_S)


def _standing(controller_id: int, views: Views) -> tuple[bool, str]:
    """Whether ``controller_id`` follows the active controller, caught up (or is it), and how
    it stands, in a few words."""
    active = active_controller_of(views)
    state, quorum = views[controller_id]
    if controller_id == active:
        return True, "it is the active controller"
    if quorum is None:
        return False, f"it is {state} and does not answer"
    if active is None:
        return False, "no controller is active yet"
    leading = views[active][1]
    assert leading is not None
    if quorum["role"] != "follower" or quorum["leader_id"] != active:
        return False, f"still {quorum['role']}, not following controller {active} yet"
    committed, target = quorum["high_watermark"], leading["high_watermark"]
    if committed < target:
        return False, f"following controller {active}, committed offset {committed} of {target}"
    return True, f"a follower of controller {active}, caught up at committed offset {committed}"


# -- words ---------------------------------------------------------------------------------------


def _states(views: Views) -> str:
    return ", ".join(f"controller {i} {state}" for i, (state, _quorum) in views.items())


def _names(ids: list[int]) -> str:
    return f"controller {ids[0]}" if len(ids) == 1 else f"controllers {_ids(ids)}"


def _ids(ids: list[int]) -> str:
    return ", ".join(str(i) for i in ids[:-1]) + (" and " if len(ids) > 1 else "") + str(ids[-1])


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"
