"""pytest's settings for the notebooks in labs/ (nbval), which tests/conftest.py does not reach."""
from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

# nbval waits 5 s at most for each output message after a cell has finished; a big figure sent while another
# pytest worker keeps the cores busy (dev.py test runs two at once) can take longer on 2 cores.
OUTPUT_SECONDS = 60
LABS = Path(__file__).parent / "labs"
BROWSER_RUN = "test_each_exercise_notebook_runs_all_in_a_real_browser"


def _browser_can_run() -> bool:
    """Whether tests/test_browser.py runs here (it skips without Chromium or Playwright)."""
    return (shutil.which("chromium") or shutil.which("chromium-browser")) is not None \
        and importlib.util.find_spec("playwright") is not None


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected what they do: only a browser run still here counts
def pytest_collection_modifyitems(config, items):
    for item in items:
        if hasattr(item, "output_timeout"):
            item.output_timeout = OUTPUT_SECONDS
    # An exercise notebook (labs/*.ipynb, as a learner gets it) that the browser test runs is not run again by
    # nbval: Run All in Chromium runs the same cells in a kernel and fails on any error output or a cell not run,
    # which is all that nbval's lax mode checks. Where Chromium or Playwright is missing (the browser test
    # skips), or the browser test is not collected, nbval runs it. The solutions (labs/solutions/) always run.
    if not _browser_can_run():
        return
    in_browser = {item.callspec.params.get("exercise_lab") for item in items
                  if item.name.startswith(BROWSER_RUN) and hasattr(item, "callspec")}
    twice = [item for item in items if hasattr(item, "output_timeout")
             and Path(str(item.fspath)).parent == LABS and Path(str(item.fspath)).stem in in_browser]
    if twice:
        config.hook.pytest_deselected(items=twice)
        items[:] = [item for item in items if item not in set(twice)]
