"""Issue 51's 'the words-follow-numbers test passes for every lesson function' for labs 08, 09 and 10: every
function of their lessons that writes a lab's words (``describe_*``, ``*_lesson``, ``*_sentence``) is called by some
test, so a lesson function added without a test of its words fails here."""
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

LABS = ("lab08_sharding_and_memory", "lab09_model_parallelism", "lab10_inside_nccl")
WORDS = re.compile(r"^(describe_\w+|\w+_lesson|[a-z]\w*_sentence)$")


def _word_functions():
    for lab in LABS:
        package = importlib.import_module(f"ringlab.lessons.{lab}")
        for info in pkgutil.iter_modules(package.__path__):
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            for name, function in inspect.getmembers(module, inspect.isfunction):
                if function.__module__ == module.__name__ and WORDS.match(name):
                    yield f"{lab}.{info.name}", name


FUNCTIONS = sorted(set(_word_functions()))


def test_the_labs_have_lesson_functions_to_check():
    assert len(FUNCTIONS) >= 25


@pytest.mark.parametrize("module,name", FUNCTIONS)
def test_every_lesson_function_of_labs_08_to_10_is_called_by_a_test(module, name):
    here = Path(__file__).parent
    callers = [p.name for p in here.glob("test_*.py") if p.name != Path(__file__).name
               and re.search(rf"\b{name}\(", p.read_text())]
    assert callers, f"{module}.{name} writes a lab's words, and no test calls it"


def test_a_share_that_rounds_to_nothing_is_said_under_one_percent():
    from ringlab.lab.words import share

    assert [share(x) for x in (0.0, 0.004, 0.005, 0.12, 1.5)] == ["0%", "under 1%", "under 1%", "12%", "150%"]
