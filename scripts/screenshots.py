"""Retake the README's pictures of the live view as a newcomer sees them: JupyterLab in Debian's
headless Chromium runs tutorial 04 (the magics) from top to bottom, then the cells below, each
waiting for this script to take its picture before it goes on.

Usage::

    .venv/bin/python scripts/screenshots.py [--out docs]

Pictures (1400 px wide, the first ``SHOT_HEIGHT_PX`` of the view):

- ``view.png``: the leader of ``orders-0`` isolated, and five acks=1 records written to it by a
  client that still reaches it: the controller elects another leader, the isolated broker keeps
  its stale claim, and its longer log (LEO 5 ahead) is drawn longer on the shared offset axis.
- ``view-dead.png``: the isolated broker healed (it truncates the acks=1 records it alone had),
  then another broker SIGKILLed: its replicas keep their last known state, greyed, and say it
  is down.
- ``view-grid.png``: a 100-partition topic of click events beside ``orders``: the health grid.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.lab import CHROMIUM, WAIT_MS, missing_browser, run_all_cells, running_lab  # noqa: E402

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # missing_browser() says how to install it
    expect = sync_playwright = None

TUTORIAL = ROOT / "notebooks" / "04-magics.ipynb"
NOTEBOOK = "screenshots.ipynb"
VIEWPORT = {"width": 1400, "height": 1200}
SHOT_HEIGHT_PX = 1000
SETTLE_S = 3.0  # three refreshes of the view after the state a picture shows was reached
ISOLATED_RECORDS = 5
WIDE_PARTITIONS = 100

# Cells run after the tutorial's own; each ends by creating a file and waiting for ``go-N``.
SCENES = {
    "isolated": f"""
import os, time
from confluent_kafka import Producer
magics = get_ipython().magics_manager.registry["LogMagics"]
lab = magics.cluster
def leader_of(partition):
    return controller_says(partition)[0]
stale = leader_of(0)
%log_cluster isolate {{stale}}
wait_for(f"a new leader for orders-0 (broker {{stale}} is isolated)", lambda: leader_of(0) != stale)
direct = Producer({{"bootstrap.servers": f"127.0.0.1:{{lab.brokers[stale].port}}", "acks": "1",
                   "logger": __import__("logging").getLogger("librdkafka")}})
for n in range({ISOLATED_RECORDS}):
    direct.produce("orders", f"only-on-the-isolated-leader-{{n}}", partition=0)
assert direct.flush(10) == 0
""",
    "dead": """
%log_cluster heal {stale}
wait_for(f"broker {stale} to rejoin the ISR of orders-0", lambda: stale in controller_says(0)[2])
victim = leader_of(1)
%log_cluster kill {victim}
wait_for(f"a new leader for orders-1", lambda: leader_of(1) != victim)
""",
    "grid": f"""
%log_cluster restart {{victim}}
%log_topic create clicks -p {WIDE_PARTITIONS} -r 3
%log_produce clicks page-view -k visitor-1
""",
}


def notebook(root: Path) -> Path:
    """Tutorial 04 with the scenes appended, each waiting for the script between them."""
    tutorial = nbformat.read(TUTORIAL, as_version=4)
    for index, (name, code) in enumerate(SCENES.items()):
        done, go = root / f"done-{name}", root / f"go-{index}"
        tutorial.cells.append(new_code_cell(
            code + f"\nopen({str(done)!r}, 'w').close()\n"
            f"while not os.path.exists({str(go)!r}):\n    time.sleep(0.1)\n"))
    path = root / NOTEBOOK
    nbformat.write(tutorial, path)
    return path


def wait_for_file(page, path: Path, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            errors = page.locator(".jp-OutputArea-output[data-mime-type*='stderr'], "
                                  ".jp-RenderedText[data-mime-type*='error']").all_inner_texts()
            raise SystemExit(f"gave up waiting for {path.name}; errors shown: {errors[-3:]}")
        time.sleep(0.2)


def shoot(page, view, path: Path) -> None:
    view.evaluate("element => element.scrollIntoView({block: 'start'})")
    box = view.bounding_box()
    height_px = min(SHOT_HEIGHT_PX, box["height"], VIEWPORT["height"] - box["y"])
    page.screenshot(path=str(path), clip={"x": box["x"], "y": box["y"], "width": box["width"],
                                          "height": height_px})
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs")
    args = parser.parse_args()
    if why := missing_browser():
        raise SystemExit(why)
    root = Path(tempfile.mkdtemp(prefix="pylog-shots-"))
    try:
        notebook(root)
        with running_lab(root) as lab, sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
            page = browser.new_page(viewport=VIEWPORT)
            page.set_default_timeout(WAIT_MS)
            page.goto(lab.url(NOTEBOOK))
            run_all_cells(page)
            view = page.locator(".pylog-view").last
            for index, name in enumerate(SCENES):
                wait_for_file(page, root / f"done-{name}")
                expect(view).to_be_visible()
                time.sleep(SETTLE_S)
                picture = {"isolated": "view.png", "dead": "view-dead.png"}.get(name)
                if name == "grid":
                    expect(view.locator(".pylog-grid .pylog-cell").first).to_be_visible()
                    time.sleep(SETTLE_S)
                    picture = "view-grid.png"
                shoot(page, view, args.out / picture)
                (root / f"go-{index}").touch()
            browser.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
