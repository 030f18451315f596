"""Every tutorial notebook runs clean, twice in a row in one kernel and once in a fresh kernel.

A run is clean when no cell errors (except the cells tagged ``raises-exception``, which must show
exactly one readable ``UsageError`` line), and no output carries a library's log line (librdkafka,
the JVM), a warning, or anything on stderr. The kernel is started without ``PYTEST_CURRENT_TEST``:
with it set, ipykernel stops copying what native code writes to stderr into the notebook, and
librdkafka's lines would pass unseen here while a user sees them.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))
CELL_TIMEOUT_S = 180
NOISE = ("rdkafka", "log4j", "WARN ", "Warning:", "Traceback")  # library logs, warnings


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
            client.nb = notebook
            for index, cell in enumerate(notebook.cells):
                client.execute_cell(cell, index)
    return runs


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
