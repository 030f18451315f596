"""No import cycles in ``pylog_nb``: every module is parsed (never imported) and its imports form a
graph that must be acyclic, ``if TYPE_CHECKING:`` and function-local imports included.

How an import becomes an edge (the module graph that ``import-linter``/grimp would build):

- ``import a.b.c`` and ``from a.b import c`` (absolute or relative) name one module: ``a.b.c`` if
  that is a module of the package (``c`` a submodule), else ``a.b`` (``c`` a name in it). A
  package is its ``__init__.py``: ``from .pkg import name`` is an edge to ``pkg/__init__.py``.
- ``from . import x`` in a module of package ``p`` is an edge to ``p.x`` when ``x`` is a
  submodule, else to ``p`` (its ``__init__``); a package ``__init__`` importing its own
  submodules is a normal edge.
- Importing ``a.b.c`` also runs ``a/__init__`` and ``a/b/__init__``, but those implicit edges
  are left out: with them, every package whose ``__init__`` re-exports a submodule would be a
  cycle with that submodule.
- Imports of modules outside ``pylog_nb`` are ignored.

Cycles are the strongly connected components (Tarjan) of more than one module, or a module that
imports itself. ``KNOWN_CYCLE_EDGES_TO_REMOVE`` lists the edges still to go; the test fails on
any other cycle, and on a listed edge that no longer exists (take it off the list).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

PACKAGE = "pylog_nb"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE  # read, not imported

# (importer, imported) edges of a known cycle, left out until they go. issue 20: removed by the
# BrokerCore rewrite; empty since server/ports.py (the txn shells, broker channels and controller
# admin take narrow Protocols instead of importing node.py / cluster_link.py). Break a new cycle
# rather than listing it here.
KNOWN_CYCLE_EDGES_TO_REMOVE: frozenset[tuple[str, str]] = frozenset()

Graph = dict[str, dict[str, int]]  # module -> imported module -> line of the first such import


def _modules() -> dict[str, Path]:
    """Every module of the package by dotted name; a package is named by its ``__init__.py``."""
    modules = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = (PACKAGE, *path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool,
              known: dict[str, Path]) -> Iterator[str]:
    """The package modules one import statement names."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name
        return
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        if node.level > 1:
            base = base[:-(node.level - 1)]
        assert base, f"{module}: relative import beyond the top-level package"
        source = ".".join([*base, *([node.module] if node.module else [])])
    else:
        assert node.module is not None
        source = node.module
    for alias in node.names:
        submodule = f"{source}.{alias.name}"
        yield submodule if submodule in known else source


def _statements(body: list) -> Iterator[ast.AST]:
    """Every statement, nested ones included (an import is one; ``ast.walk`` would also visit
    every expression, several times slower)."""
    for node in body:
        yield node
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            yield from _statements(getattr(node, field, None) or [])


def imports(source: str | bytes, module: str, is_package: bool, modules: dict[str, Path],
            filename: str = "<source>") -> dict[str, int]:
    """The package modules ``module`` imports anywhere in ``source`` (``if TYPE_CHECKING:``
    blocks and functions included), each with the line of its first import."""
    edges: dict[str, int] = {}
    for node in _statements(ast.parse(source, filename).body):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        for target in _imported(node, module, is_package, modules):
            while target not in modules and "." in target:  # ``import a.b.X``: a.b
                target = target.rsplit(".", 1)[0]
            if target in modules:
                edges[target] = min(edges.get(target, node.lineno), node.lineno)
    return edges


@functools.cache
def import_graph() -> tuple[Graph, dict[str, Path]]:
    """Each module's imports of package modules (shared by the tests: do not change it)."""
    modules = _modules()
    graph = {module: imports(path.read_bytes(), module, path.name == "__init__.py", modules,
                             str(path))
             for module, path in modules.items()}
    return graph, modules


def strongly_connected(graph: Graph) -> list[list[str]]:
    """Tarjan's strongly connected components (iterative), each sorted, in discovery order."""
    index: dict[str, int] = {}
    lowlink: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = lowlink[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            vertex, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = lowlink[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(graph[successor])))
                    break
                if successor in on_stack:
                    lowlink[vertex] = min(lowlink[vertex], index[successor])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    lowlink[parent] = min(lowlink[parent], lowlink[vertex])
                if lowlink[vertex] == index[vertex]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == vertex:
                            break
                    components.append(sorted(component))
    return components


def cycles(graph: Graph) -> list[list[str]]:
    """The components that are cycles: several modules, or one importing itself."""
    return [c for c in strongly_connected(graph)
            if len(c) > 1 or c[0] in graph[c[0]]]


def describe(graph: Graph, modules: dict[str, Path], cycle: list[str]) -> str:
    """One cycle: its modules, then each edge inside it with the file and line."""
    members = set(cycle)
    lines = [f"cycle of {len(cycle)} modules: {', '.join(cycle)}"]
    for module in cycle:
        path = modules[module].relative_to(ROOT.parent)
        lines += [f"    {module} -> {target}  ({path}:{line})"
                  for target, line in sorted(graph[module].items()) if target in members]
    return "\n".join(lines)


def test_tarjan_finds_cycles_and_only_cycles():
    graph: Graph = {"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1, "d": 1}, "d": {"d": 1},
                    "e": {"a": 1}, "f": {}}
    assert sorted(cycles(graph)) == [["a", "b", "c"], ["d"]]
    assert sorted(map(len, strongly_connected(graph))) == [1, 1, 1, 3]


def test_imports_resolve_to_modules_and_packages():
    graph, _ = import_graph()
    # ``from .. import errors`` in broker/server: the submodule broker/errors.py
    assert "pylog_nb.broker.errors" in graph["pylog_nb.broker.server.controller_admin"]
    # ``from ..txn import AddPartitionsAnswer``: a name in the package broker/txn/__init__.py
    assert "pylog_nb.broker.txn" in graph["pylog_nb.broker.server.add_partitions_manager"]
    # a package __init__ importing its own submodules (``from .admin import ...``)
    assert "pylog_nb.broker.server.apis.admin" in graph["pylog_nb.broker.server.apis"]
    # ``from ...protocol import versions as v``: the submodule, not the package
    assert "pylog_nb.broker.protocol.versions" in graph["pylog_nb.broker.server.apis"]
    # absolute: ``from pylog_nb.broker.records import codecs``
    assert "pylog_nb.broker.records.codecs" in graph["pylog_nb.broker.records.batch"]


def test_type_checking_and_local_imports_are_edges():
    _, modules = import_graph()
    source = """
from typing import TYPE_CHECKING
import asyncio
if TYPE_CHECKING:
    from .node import BrokerNode
def later():
    from . import tasks
    import pylog_nb.broker.server.purgatory
    from .. import errors, txn
"""
    assert imports(source, "pylog_nb.broker.server.stats", False, modules) == {
        "pylog_nb.broker.server.node": 5, "pylog_nb.broker.server.tasks": 7,
        "pylog_nb.broker.server.purgatory": 8, "pylog_nb.broker.errors": 9,
        "pylog_nb.broker.txn": 9}
    # in a package's __init__, ``.`` is the package itself
    assert imports("from . import tasks\nfrom .apis import HANDLERS", "pylog_nb.broker.server",
                   True, modules) == {"pylog_nb.broker.server.tasks": 1,
                                      "pylog_nb.broker.server.apis": 2}


def test_no_import_cycles():
    full, modules = import_graph()
    graph = {module: {target: line for target, line in edges.items()
                      if (module, target) not in KNOWN_CYCLE_EDGES_TO_REMOVE}
             for module, edges in full.items()}
    found = [describe(graph, modules, cycle) for cycle in cycles(graph)]
    assert not found, "import cycles in pylog_nb:\n" + "\n".join(found)


def test_known_cycle_edges_still_exist():
    graph, _ = import_graph()
    gone = sorted(edge for edge in KNOWN_CYCLE_EDGES_TO_REMOVE if edge[1] not in graph[edge[0]])
    assert not gone, f"take these off KNOWN_CYCLE_EDGES_TO_REMOVE, they are gone: {gone}"
