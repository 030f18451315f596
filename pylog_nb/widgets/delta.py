"""What changed between two snapshots, as a patch small enough to send every second.

Theory of operation: a snapshot of 100 busy partitions is ~100 KB of JSON, but from one second to
the next only a few numbers per replica change (HW, LEO, lag). ``diff(old, new)`` walks both
JSON-like values and returns a patch that holds only those; ``apply(old, patch)`` rebuilds
``new``. The browser (``cluster_view.js``, ``applyPatch``) applies the same rules:

- a dict patch ``{key: sub_patch, ...}`` changes only the keys it names; ``"$del": [keys]``
  removes keys; a list of unchanged length is patched the same way, keyed by index (as text);
- ``{"$new": value}`` replaces the value whole (a new key, a list whose length changed, a
  value whose type changed); a scalar is replaced by itself.

Keys starting with ``$`` never occur in a snapshot (Kafka topic names are ``[a-zA-Z0-9._-]``
and the other keys are fixed names or broker ids), so the markers cannot collide. Dict keys are
sent as text (JSON), so ``apply`` works on, and returns, the JSON form of the snapshot.
"""

from __future__ import annotations

from typing import Any

NEW = "$new"
DELETE = "$del"


def diff(old: Any, new: Any) -> Any:
    """A patch turning ``old`` into ``new`` (both JSON-like and not equal)."""
    if isinstance(old, dict) and isinstance(new, dict):
        patch: dict[str, Any] = {}
        for key, value in new.items():
            if key not in old:
                patch[str(key)] = _whole(value)
            elif old[key] != value:
                patch[str(key)] = diff(old[key], value)
        gone = [str(key) for key in old if key not in new]
        if gone:
            patch[DELETE] = gone
        return patch
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        pairs = enumerate(zip(old, new, strict=True))
        return {str(index): diff(a, b) for index, (a, b) in pairs if a != b}
    return _whole(new)


def _whole(value: Any) -> Any:
    """``value`` as a patch that replaces whatever was there."""
    return {NEW: value} if isinstance(value, (dict, list)) else value


def apply(old: Any, patch: Any) -> Any:
    """``old`` (JSON form: text keys) with ``patch`` applied; ``old`` is not changed."""
    if not isinstance(patch, dict):
        return patch
    if NEW in patch:
        return patch[NEW]
    if isinstance(old, list):
        items = list(old)
        for index, sub in patch.items():
            items[int(index)] = apply(items[int(index)], sub)
        return items
    assert isinstance(old, dict), (old, patch)
    result = {key: value for key, value in old.items() if key not in patch.get(DELETE, ())}
    for key, sub in patch.items():
        if key != DELETE:
            result[key] = apply(result.get(key), sub)
    return result
