"""The labs' quizzes: every lab ends with one, every computed answer is accepted and a wrong one refused,
the solution notebooks answer every question right and the exercise notebooks run on unanswered."""
import contextlib
import io
import re

import nbformat
import pytest

from ringlab import lessons
from ringlab.lab import notebooks
from ringlab.lab.exercises import NotDoneYet
from ringlab.lab.quiz import Question, Quiz
from ringlab.lessons import lab_key

LABS = [p.stem for p in notebooks.sources()]
QUIZZES = {key: lessons.quiz(key) for key in lessons.ROOMS}
# What a lab passes in from its own run, for the questions about it: lab 04's async pushes, (worker,
# staleness) in the order applied; worker 3 is the stalest here.
MEASURED = {"pushes": [(0, 0), (1, 1), (2, 2), (3, 3), (0, 3), (1, 3), (2, 3), (3, 3), (0, 2), (3, 4)]}
EVERY_QUESTION = [(lab, n) for lab, quiz in QUIZZES.items() for n in range(1, len(quiz) + 1)]


def question(lab, number):
    return lessons.quiz(lab).question(number)


def _measured(q: Question) -> dict:
    return {name: MEASURED[name] for name in q.measured}


def _quiz_cells(notebook):
    """The code cells of the notebook's "## Quiz" section (which must be its last section)."""
    cells = notebook.cells
    starts = [i for i, c in enumerate(cells) if c.cell_type == "markdown" and c.source.startswith("## Quiz")]
    assert len(starts) == 1, "one '## Quiz' section"
    later = [c for c in cells[starts[0] + 1:] if c.cell_type == "markdown" and re.search(r"^#+ ", c.source, re.M)]
    assert later == [], "the quiz is the lab's last section"
    return [c for c in cells[starts[0] + 1:] if c.cell_type == "code"]


def test_every_lab_has_a_quiz_of_three_to_five_questions():
    assert sorted(QUIZZES) == sorted(lab_key(lab) for lab in LABS)
    for lab in LABS:
        quiz = lessons.quiz(lab)
        assert isinstance(quiz, Quiz) and quiz.lab == lab_key(lab) and 3 <= len(quiz) <= 5, lab


@pytest.mark.parametrize("lab", LABS)
def test_the_quiz_is_the_last_section_and_asks_every_question_in_order(lab):
    notebook = nbformat.read(notebooks.LABS / "solutions" / f"{lab}.ipynb", as_version=4)
    cells = _quiz_cells(notebook)
    count = len(lessons.quiz(lab))
    assert len(cells) == 3 * count  # per question: ask, answer (a solution cell), check
    room = lessons.room(lab).__name__
    assert f"from {room} import QUIZ" in cells[0].source or f"from {room}.quiz import QUIZ" in cells[0].source
    for number in range(1, count + 1):
        shown, answered, checked = cells[3 * number - 3:3 * number]
        assert f"QUIZ.ask({number}" in shown.source
        assert "solution" in answered.metadata.get("tags", []) and answered.source.startswith("answer = None")
        assert f"QUIZ.check({number}, answer" in checked.source
    source = (notebooks.LABS / "src" / f"{lab}.py").read_text()
    assert source.count("\n# ## Quiz\n") == 1


@pytest.mark.parametrize("lab,number", EVERY_QUESTION)
def test_the_checker_accepts_the_computed_answer_and_refuses_a_wrong_one(lab, number, capsys):
    q = question(lab, number)
    measured = _measured(q)
    right = q.answer(**measured)
    assert q.is_right(right, **measured)
    lessons.quiz(lab).check(number, right, strict=True, **measured)
    assert "right" in capsys.readouterr().out
    if q.choices:
        assert right in q.choices
        wrong = [c for c in q.choices if c != right]
        assert wrong and not any(q.is_right(c, **measured) for c in wrong)
        assert q.is_right(right.upper(), **measured)  # any case
    else:
        assert right != 0
        wrong = [right * 2, right / 2]
        assert not any(q.is_right(w, **measured) for w in wrong)
    with pytest.raises(AssertionError, match="Hint: "):
        lessons.quiz(lab).check(number, wrong[0], strict=True, **measured)
    shown = lessons.quiz(lab).ask(number, **measured)
    assert "<details><summary>Answer</summary>" in shown._repr_html_() and "{" not in repr(shown)


def test_an_answer_can_be_read_off_within_its_tolerance():
    q = question("00", 4)  # a fraction read off a heatmap: 5%
    assert q.rel_tol == 0.05
    assert q.is_right(q.answer() * 1.04) and not q.is_right(q.answer() * 1.06)
    assert question("03", 3).rel_tol == 0 and not question("03", 3).is_right(question("03", 3).answer() + 1)


def test_without_strict_nothing_raises_and_the_learner_is_told_what_to_do(monkeypatch, capsys):
    monkeypatch.delenv("RINGLAB_STRICT_EXERCISES", raising=False)
    lessons.quiz("03").check(1, None)
    assert "Question 1: not answered yet" in capsys.readouterr().out
    lessons.quiz("03").check(1, 3.5)
    said = capsys.readouterr().out
    assert "you answered 3.5 GiB, too high" in said and "Hint: 2(n-1) steps" in said
    lessons.quiz("03").check(1, "1.75")
    assert "answer with a number (in GiB), not '1.75'" in capsys.readouterr().out
    lessons.quiz("02").check(4, "sideways")
    assert "'sideways' is not one of the choices: 'up', 'down', 'same'" in capsys.readouterr().out
    monkeypatch.setenv("RINGLAB_STRICT_EXERCISES", "1")
    with pytest.raises(NotDoneYet, match="not answered yet"):
        lessons.quiz("03").check(1, None)


def test_bad_labs_numbers_and_measurements_are_refused():
    with pytest.raises(ValueError, match="no quiz for lab 12; the labs with quizzes are 00, 01"):
        lessons.quiz(12)
    with pytest.raises(ValueError, match="name a lab by its number"):
        lessons.quiz("allreduce")
    with pytest.raises(ValueError, match="questions 1 to 4, not 0"):
        question("03_allreduce", 0)
    with pytest.raises(ValueError, match="takes pushes from the lab; got none"):
        question("04", 4).answer()
    with pytest.raises(ValueError, match="takes no measured values from the lab; got pushes"):
        lessons.quiz("03").check(1, 1.75, pushes=[])
    with pytest.raises(ValueError, match="an answer off by 2x is wrong"):
        Question("?", lambda: 1.0, "", "", rel_tol=0.5)


def test_a_measured_answer_follows_the_measurement():
    q = question("04", 4)
    assert q.answer(**MEASURED) == 3
    assert q.answer(pushes=[(0, 5), (1, 0), (2, 1)]) == 0


def _run_quiz(notebook, strict: bool, monkeypatch) -> str:
    """Execute the notebook's quiz cells in this process; what they printed."""
    if strict:
        monkeypatch.setenv("RINGLAB_STRICT_EXERCISES", "1")
    else:
        monkeypatch.delenv("RINGLAB_STRICT_EXERCISES", raising=False)
    space = dict(MEASURED)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for cell in _quiz_cells(notebook):
            exec(cell.source, space)
    return out.getvalue()


@pytest.mark.parametrize("lab", LABS)
def test_the_solutions_answer_right_and_the_exercises_run_on_unanswered(lab, monkeypatch):
    count = len(lessons.quiz(lab))
    solved = _run_quiz(nbformat.read(notebooks.LABS / "solutions" / f"{lab}.ipynb", as_version=4), True, monkeypatch)
    assert solved.count(": right, ") == count, solved
    fresh = _run_quiz(nbformat.read(notebooks.LABS / f"{lab}.ipynb", as_version=4), False, monkeypatch)
    assert fresh.count("not answered yet") == count, fresh
