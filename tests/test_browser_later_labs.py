"""Run All in a real browser, labs 05 onwards: test_browser.py's check, in a file of its own so that
pytest-xdist (which gives each worker whole files) runs the two halves of the labs side by side."""
import pytest

from test_browser import (EARLIER, LABS, LATER, exercise_lab, pytestmark,  # noqa: F401 (a fixture, the skip)
                          runs_all_in_a_real_browser)


def test_the_two_files_share_the_labs_between_them():
    assert EARLIER + LATER == LABS and len(LATER) >= 3


@pytest.mark.timeout(420)
@pytest.mark.parametrize("exercise_lab", LATER, indirect=True)
def test_each_later_exercise_notebook_runs_all_in_a_real_browser(exercise_lab, request):
    """Run All on the notebook as shipped (see test_browser.py)."""
    runs_all_in_a_real_browser(exercise_lab, request.node.callspec.params["exercise_lab"])
