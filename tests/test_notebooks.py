"""Every tutorial notebook runs top to bottom in a real kernel against a real local cluster."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))
CELL_TIMEOUT_S = 120
NOISE = ("rdkafka", "log4j", "WARN ", "Warning:")  # librdkafka's and the JVM's logs, warnings


def test_there_are_tutorial_notebooks():
    assert NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_clean(path, tmp_path):
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(notebook, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    errors = [o for c in notebook.cells if c.cell_type == "code" and not _shows_an_error(c)
              for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, errors
    noise = [t for t in _texts(notebook) if any(n in t for n in NOISE)]
    assert not noise, f"a library's log lines reached the notebook: {noise[:3]}"
    for cell in filter(_shows_an_error, notebook.cells):  # one readable line, no traceback
        shown = [o.get("text", "") for o in cell.outputs]
        assert len(shown) == 1 and shown[0].startswith("UsageError: "), shown
        assert shown[0].count("\n") == 1, shown


def _texts(notebook) -> list[str]:
    return [str(o.get("text", "")) for c in notebook.cells if c.cell_type == "code"
            for o in c.get("outputs", [])]


def _shows_an_error(cell) -> bool:
    """A cell tagged raises-exception demonstrates an error on purpose (nbclient's convention)."""
    return "raises-exception" in cell.metadata.get("tags", [])
