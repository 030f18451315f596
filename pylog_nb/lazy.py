"""A package's public names imported on first use (PEP 562), not when the package is.

A Spark query's planning worker is a fresh interpreter that imports ``pylog_nb.spark.source``;
importing each package's every module first (pandas among them) cost it 0.7 s per query.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, modules: Mapping[str, tuple[str, ...]]) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``package``: each name of ``modules[m]`` comes from module ``m``
    (relative to the package), imported when the name is first asked for."""
    where = {name: module for module, names in modules.items() for name in names}
    # importing a submodule sets the package's attribute of its name, hiding a lazy one
    assert not where.keys() & {m.lstrip(".") for m in modules}, "name a module as no export"

    def getattr_(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        vars(importlib.import_module(package))[name] = value  # asked once
        return value

    return getattr_
