"""Every tutorial notebook runs clean, twice in a row in one kernel and once in a fresh kernel,
and again in a kernel whose previous Run All stopped at a failed cell.

A run is clean when no cell errors (except the cells tagged ``raises-exception``, which must show
exactly one readable ``UsageError`` line), and no output carries a library's log line (librdkafka,
the JVM), a warning, or anything on stderr. The kernel is started without ``PYTEST_CURRENT_TEST``:
with it set, ipykernel stops copying what native code writes to stderr into the notebook, and
librdkafka's lines would pass unseen here while a user sees them.

The failed Run All stops right after a cell that leaves the cluster broken (a broker or the
active controller killed or paused, a transaction open, a live view open): a cell raising
``RuntimeError`` is inserted there, and the run stops at it, as Jupyter's Run All does. The next
Run All in that kernel must be clean and must say, in the cell that starts the cluster, what it
did with the one left running.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))
CELL_TIMEOUT_S = 180
NOISE = ("rdkafka", "log4j", "WARN ", "Warning:", "Traceback")  # library logs, warnings
FAILING_CELL = 'raise RuntimeError("injected: a cell failed half-way through Run All")'
# Per tutorial: the code the failing cell follows (the first cell containing it), and what the
# next Run All says about the cluster the failed run left (None: it starts a cluster of its own).
FAULT_POINTS: dict[str, tuple[str, str | None] | None] = {
    "01-first-log.ipynb": ("cluster.restart(1)", "reusing the cluster already running on"),
    # A controller and a broker down, the background producer still writing.
    "02-replication.ipynb": ("cluster.kill(victim)", "stopped what was left of the cluster on"),
    # It stops its earlier cluster itself and empties data/tutorial-03 before starting anew.
    "03-consumer-groups.ipynb": ("cluster.kill(old)", None),
    "04-magics.ipynb": ("%log_cluster pause", "stopped the running cluster (3 brokers)"),
    # Same restart as 04 and 07, with Spark's session kept: clean by hand (failed at the first
    # %log_spark), but a JVM makes it ~3 minutes, more than the rest together.
    "05-spark.ipynb": None,
    "06-compaction.ipynb": ("ClusterView(cluster)", "reusing the cluster already running on"),
    "07-exactly-once.ipynb": ("%log_cluster kill {coordinator}",
                              "stopped the running cluster (3 brokers)"),
    # A share consumer left holding locked records, other consumers open: the next Run All closes
    # them while the cluster still answers, stops it and empties data/tutorial-08.
    "08-queues.ipynb": ("stuck = share_consumer(", "stopped the cluster the previous run left"),
    # Its processingTime query left running and the view open: the next Run All stops the
    # query in its first cell, then the cluster.
    "09-stream-processing.ipynb": ("query = run_counts(trigger=",
                                   "stopped the running cluster (3 brokers)"),
    # Users and ACLs half made: the next Run All starts a fresh cluster (a temporary directory).
    "10-security.ipynb": ("%log_acl add alice write --topic orders- --prefixed",
                          "stopped the running cluster (1 broker)"),
}


def test_there_are_tutorial_notebooks():
    assert NOTEBOOKS


@pytest.mark.timeout(1200)  # three runs; the Spark tutorial starts a JVM
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_clean_twice_in_one_kernel_and_in_a_fresh_one(path, tmp_path,
                                                                    monkeypatch):
    monkeypatch.delenv("PYTEST_CURRENT_TEST", raising=False)
    first, second = _run_twice_in_one_kernel(path, tmp_path / "one-kernel")
    fresh = _run(path, tmp_path / "fresh-kernel")
    for run, notebook in (("first run", first), ("second run", second), ("fresh kernel", fresh)):
        _check_clean(notebook, f"{path.name}, {run}")


def test_every_tutorial_has_a_fault_point_or_a_reason_not_to():
    assert {p.name for p in NOTEBOOKS} <= FAULT_POINTS.keys()


@pytest.mark.timeout(600)
@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if FAULT_POINTS.get(p.name)],
                         ids=lambda p: p.name)
def test_run_all_after_a_failed_run_all_in_the_same_kernel_runs_clean(path, tmp_path,
                                                                      monkeypatch):
    monkeypatch.delenv("PYTEST_CURRENT_TEST", raising=False)
    point = FAULT_POINTS[path.name]
    assert point is not None  # only those with one are parametrized
    after, said = point
    failed = _with_failing_cell(nbformat.read(path, as_version=4), after)
    again = nbformat.read(path, as_version=4)
    client = _client(failed, tmp_path)
    with client.setup_kernel():
        _run_all_until_an_error(client, failed)
        _switch_notebook(client, again)
        for index, cell in enumerate(again.cells):
            client.execute_cell(cell, index)
    _check_clean(again, f"{path.name}, Run All after a failed one")
    if said is not None:
        assert any(said in t for c in again.cells for t in _texts(c)), (
            f"{path.name}: no cell says {said!r}")


def _with_failing_cell(notebook, after: str):
    """``notebook`` with a failing cell after the first code cell containing ``after``."""
    index = next((i for i, c in enumerate(notebook.cells)
                  if c.cell_type == "code" and after in c.source), None)
    assert index is not None, f"no code cell contains {after!r}: update FAULT_POINTS"
    notebook.cells.insert(index + 1, nbformat.v4.new_code_cell(FAILING_CELL))
    return notebook


def _run_all_until_an_error(client: NotebookClient, notebook) -> None:
    """Run the cells in order and stop at the first that fails, as Jupyter's Run All does; it
    must be the inserted one."""
    _switch_notebook(client, notebook)
    for index, cell in enumerate(notebook.cells):
        try:
            client.execute_cell(cell, index)
        except CellExecutionError:
            assert cell.source == FAILING_CELL, f"cell {index} failed first: {cell.source}"
            return
    raise AssertionError("the inserted cell did not fail")


def _client(notebook, cwd: Path) -> NotebookClient:
    cwd.mkdir(parents=True, exist_ok=True)
    return NotebookClient(notebook, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                          resources={"metadata": {"path": str(cwd)}})


def _run(path: Path, cwd: Path):
    notebook = nbformat.read(path, as_version=4)
    _client(notebook, cwd).execute()
    return notebook


def _run_twice_in_one_kernel(path: Path, cwd: Path):
    """Run All, then Run All again in the same kernel (a user's second try)."""
    runs = [nbformat.read(path, as_version=4), nbformat.read(path, as_version=4)]
    client = _client(runs[0], cwd)
    with client.setup_kernel():
        for notebook in runs:
            _switch_notebook(client, notebook)
            for index, cell in enumerate(notebook.cells):
                client.execute_cell(cell, index)
    return runs


def _switch_notebook(client: NotebookClient, notebook) -> None:
    """Run ``notebook``'s cells next in the client's kernel, as a frontend runs a notebook
    again: the earlier run's outputs are gone, so an update of one of their displays (a closed
    view leaves a picture in its place) changes nothing here. nbclient would apply it by the
    earlier run's cell and output indexes to this notebook."""
    client.nb = notebook
    client._display_id_map = {}


def _check_clean(notebook, where: str) -> None:
    code = [c for c in notebook.cells if c.cell_type == "code"]
    errors = [o for c in code if not _shows_an_error(c)
              for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, f"{where}: {errors}"
    noise = [t for c in code for t in _texts(c) if any(n in t for n in NOISE)]
    assert not noise, (
        f"{where}: a library's log line or a warning reached the notebook: {noise[:3]}")
    stderr = [o.get("text", "") for c in code if not _shows_an_error(c)
              for o in c.get("outputs", []) if o.get("name") == "stderr"]
    assert not stderr, f"{where}: stderr output: {stderr[:3]}"
    for cell in filter(_shows_an_error, code):  # one readable line, no traceback
        shown = [t for t in _texts(cell) if t.strip()]
        assert len(shown) == 1 and shown[0].startswith("UsageError: "), (where, shown)
        assert shown[0].count("\n") == 1, (where, shown)


def _texts(cell) -> list[str]:
    return [str(o.get("text", "")) for o in cell.get("outputs", [])]


def _shows_an_error(cell) -> bool:
    """A cell tagged raises-exception demonstrates an error on purpose (nbclient's convention)."""
    return "raises-exception" in cell.metadata.get("tags", [])
