"""pytest's settings for the notebooks in labs/ (nbval), which tests/conftest.py does not reach."""
from __future__ import annotations

# nbval waits 5 s at most for each output message after a cell has finished; a big figure sent while another
# pytest worker keeps the cores busy (dev.py test runs two at once) can take longer on 2 cores.
OUTPUT_SECONDS = 60


def pytest_collection_modifyitems(items):
    for item in items:
        if hasattr(item, "output_timeout"):
            item.output_timeout = OUTPUT_SECONDS
