"""The labs: notebooks in step with their sources, exercises hidden, a wrong solution caught, and a
rank that raises failing the run fast instead of hanging it."""
import os
import subprocess
import sys
import time

import nbformat
import pytest

from ringlab.lab import notebooks

ROOT = notebooks.LABS.parent


def test_notebooks_are_built_from_their_sources():
    assert notebooks.sources(), "no lab sources found"
    assert notebooks.stale() == [], "run: python -m ringlab.lab build"


def test_exercise_versions_hide_the_solutions():
    for source in notebooks.sources():
        exercise = nbformat.read(notebooks.LABS / f"{source.stem}.ipynb", as_version=4)
        solution = nbformat.read(notebooks.LABS / "solutions" / f"{source.stem}.ipynb", as_version=4)
        for mine, theirs in zip(exercise.cells, solution.cells):
            if "solution" in theirs.metadata.get("tags", []):
                assert mine.source.endswith(notebooks.PLACEHOLDER) and mine.source != theirs.source
                compile(mine.source, source.name, "exec")  # still valid Python for the learner
            else:
                assert mine.source == theirs.source


def test_a_solution_cell_needs_its_marker():
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1", metadata={"tags": ["solution"]})])
    with pytest.raises(ValueError, match="has no '# solution' line"):
        notebooks.exercise_version(notebook)


def _run_until(notebook, last_source_fragment: str, replace: dict[str, str] | None = None):
    """Execute the notebook's cells in order up to the one containing the fragment (no cluster cells)."""
    from nbclient import NotebookClient

    cells = []
    for cell in notebook.cells:
        if cell.cell_type == "code":
            source = cell.source
            for old, new in (replace or {}).items():
                source = source.replace(old, new)
            cells.append(nbformat.v4.new_code_cell(source))
            if last_source_fragment in cell.source:
                break
    client = NotebookClient(nbformat.v4.new_notebook(cells=cells), timeout=120, kernel_name="python3")
    return client.execute()


def _printed(executed) -> str:
    return "".join(o.get("text", "") for cell in executed.cells for o in cell.get("outputs", [])
                   if o.get("output_type") == "stream")


def test_a_wrong_or_unfinished_answer_is_reported_and_the_lab_runs_on(monkeypatch):
    monkeypatch.delenv("RINGLAB_STRICT_EXERCISES", raising=False)
    lab = nbformat.read(notebooks.LABS / "solutions" / "03_allreduce.ipynb", as_version=4)
    check = "send_chunk = check_reduce_scatter_rule(send_chunk)"
    assert "Correct" in _printed(_run_until(lab, check))
    wrong = _printed(_run_until(lab, check, {"return (j - i) % n": "return (j + i) % n"}))
    assert "send_chunk is not right yet: with 3 ranks your rule does not give an allreduce" in wrong
    assert "Hint:" in wrong and "use the reference rule" in wrong and "Traceback" not in wrong
    exercise = nbformat.read(notebooks.LABS / "03_allreduce.ipynb", as_version=4)
    assert "send_chunk: not done yet" in _printed(_run_until(exercise, check))


def every_check() -> dict:
    """{name: function} of every exercise check in the lessons' rooms."""
    import importlib
    import pkgutil

    from ringlab import lessons

    found = {}
    for info in pkgutil.walk_packages(lessons.__path__, lessons.__name__ + "."):
        module = importlib.import_module(info.name)
        found.update({name: getattr(module, name) for name in dir(module) if name.startswith("check_")})
    return found


def test_every_solution_passes_its_check_strictly():
    checks = every_check()
    checked = 0
    for source in notebooks.sources():
        lab = nbformat.read(notebooks.LABS / "solutions" / f"{source.stem}.ipynb", as_version=4)
        cells = [c for c in lab.cells if c.cell_type == "code"]
        for i, cell in enumerate(cells):
            if "solution" not in cell.metadata.get("tags", []):
                continue
            if "QUIZ.check(" in cells[i + 1].source:
                continue  # a quiz answer: tests/test_quiz.py runs those
            space = dict(checks)
            exec(cells[0].source, space)  # the lab's imports, which a solution may use
            exec(cell.source, space)
            call = next(c.source for c in cells[i + 1:] if "= check_" in c.source)
            name, check = (part.strip() for part in call.split("#")[0].split("="))
            check_name, argument = check.rstrip(")").split("(")
            assert space[check_name](space[argument], strict=True) is space[argument], f"{source.name}: {call}"
            checked += 1
    assert checked == 27  # labs 00-06: 11, lab 07: 2, lab 08: 2, lab 09: 8, lab 10: 2, lab 11: 2


@pytest.mark.timeout(300)
def test_a_lab_whose_rank_raises_fails_the_run_fast(tmp_path):
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("from ringlab.lab.cluster import MPICluster\nranks = MPICluster(2).start()"),
        nbformat.v4.new_code_cell("%%px\nimport numpy as np\nfrom mpi4py import MPI\n"
                                  "if MPI.COMM_WORLD.Get_rank() == 1:\n    raise RuntimeError('boom on rank 1')\n"
                                  "MPI.COMM_WORLD.Allreduce(np.ones(3), np.empty(3))"),
        nbformat.v4.new_code_cell("ranks.stop()"),
    ], metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    path = tmp_path / "raises.ipynb"
    nbformat.write(notebook, path)
    start = time.monotonic()
    (tmp_path / "tmp").mkdir()  # where the cluster keeps its folder, so that we see it go
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "--nbval-lax", "--nbval-current-env",
                           "-p", "no:cacheprovider", "-o", "addopts=", str(path)],
                          capture_output=True, text=True, timeout=240, cwd=tmp_path,
                          env={**os.environ, "TMPDIR": str(tmp_path / "tmp")})
    assert done.returncode != 0, done.stdout[-2000:]
    assert "1 failed" in done.stdout
    assert "boom on rank 1" in done.stdout  # the rank's own error is shown
    assert time.monotonic() - start < 120
    assert list((tmp_path / "tmp").glob("ringlab-cluster-*")) == []  # stopped, folder and all


MULTI_RANK_LABS = [p.stem for p in notebooks.sources() if "%%px" in p.read_text()]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("lab", MULTI_RANK_LABS)
def test_the_per_rank_cells_run_as_a_script_under_mpiexec(lab, tmp_path):
    from ringlab.cluster.launch import run_mpi

    nranks, text = notebooks.rank_script(lab)
    assert "%%px" not in text and nranks >= 2
    script = tmp_path / f"{lab}_ranks.py"
    script.write_text(text)
    done = run_mpi(nranks, [str(script)], timeout=280, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]


def test_rank_scripts_need_a_lab_with_per_rank_cells():
    assert len(MULTI_RANK_LABS) >= 4
    with pytest.raises(ValueError, match="no single lab named '9'"):
        notebooks.rank_script("9")
    with pytest.raises(ValueError, match="05_scaling has no %%px cells"):
        notebooks.rank_script("05")
    assert notebooks.rank_script("03_allreduce") == notebooks.rank_script("03")


CODE_WIDTH = 120  # characters a code cell shows at JupyterLab's default width before it cuts a line off


def test_no_code_line_is_wider_than_a_code_cell_shows():
    wide = []
    for source in notebooks.sources():
        code = True
        for number, line in enumerate(source.read_text().splitlines(), 1):
            if line.startswith("# %%"):
                code = "[markdown]" not in line
            elif code and len(line) > CODE_WIDTH:
                wide.append(f"{source.name}:{number} ({len(line)})")
    assert not wide, f"code lines a cell would cut off: {wide}"
