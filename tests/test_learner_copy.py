"""Where a learner works: copies of the labs in my_labs/ (git-ignored), made by `python3 dev.py lab`, that open
without unsaved changes and leave the committed notebooks alone; the README says so, and says where the URL
is on a machine without a browser. Lab 03's words follow its code."""
import re
from pathlib import Path

import nbformat

from ringlab.lab import notebooks

ROOT = Path(__file__).resolve().parent.parent


def test_the_labs_are_copied_once_and_the_learners_files_kept(tmp_path):
    dest = tmp_path / "my_labs"
    committed = [notebooks.LABS / "03_allreduce.ipynb", notebooks.LABS / "solutions" / "03_allreduce.ipynb"]
    before = [p.read_bytes() for p in committed]
    written = notebooks.learner_copy(dest)
    names = {p.relative_to(dest).as_posix() for p in written}
    for lab in notebooks.sources():
        assert f"{lab.stem}.ipynb" in names and f"solutions/{lab.stem}.ipynb" in names
    assert "glossary.md" in names and "README.md" in names  # the labs link to them
    mine = dest / "03_allreduce.ipynb"
    notebook = nbformat.read(mine, as_version=4)
    assert [c.source for c in notebook.cells] == [c.source for c in nbformat.read(
        notebooks.LABS / "03_allreduce.ipynb", as_version=4).cells]
    notebook.cells[0].source = "# my notes"
    nbformat.write(notebook, mine)
    assert notebooks.learner_copy(dest) == []  # nothing new: the learner's copy stays as it is
    assert nbformat.read(mine, as_version=4).cells[0].source == "# my notes"
    mine.unlink()
    assert notebooks.learner_copy(dest) == [mine]  # deleted: copied afresh
    assert [p.read_bytes() for p in committed] == before  # the committed notebooks are untouched


def test_a_copy_names_the_kernel_as_jupyterlab_will():
    """JupyterLab writes the kernel's spec and language_info into a notebook when its kernel starts, and marks it
    changed if they differ: the committed notebooks carry bare names, a learner's copy the full entries."""
    import sys

    meta = notebooks.kernel_metadata()
    assert meta["kernelspec"]["name"] == "python3" and meta["kernelspec"]["display_name"]
    assert meta["language_info"]["name"] == "python"
    assert meta["language_info"]["version"] == sys.version.split()[0]
    assert {"codemirror_mode", "pygments_lexer", "mimetype", "file_extension"} <= set(meta["language_info"])


def test_the_copy_command_and_the_launcher(tmp_path, capsys):
    assert notebooks.main(["copy", str(tmp_path / "mine")]) == 0
    assert "your labs are in" in capsys.readouterr().out and (tmp_path / "mine" / "03_allreduce.ipynb").exists()
    assert "my_labs/" in (ROOT / ".gitignore").read_text().splitlines()
    dev = (ROOT / "dev.py").read_text()
    assert dev.index('"ringlab.lab", "copy"') < dev.index('"lab", str(ROOT / "my_labs")')  # copied, then opened


def test_the_readme_says_where_the_labs_are_and_where_the_url_is():
    readme = (ROOT / "README.md").read_text()
    start = readme[readme.index("python3 dev.py lab"):readme.index("python3 dev.py test")]
    assert "my_labs/" in start and "git" in start
    assert "URL" in start and "token" in start and "--no-browser" in start  # a machine without a browser


def test_lab_03_says_the_slowdown_its_code_runs():
    """Issue 51: the text said "@10, ten times slower" where the code ran @20. Every "@N" the text names is one
    the lab's machines run, and no slowdown is named in words."""
    from ringlab.lessons import lab03_allreduce as lesson

    source = (notebooks.LABS / "src" / "03_allreduce.py").read_text()
    text = "\n".join(line for line in source.splitlines() if line.startswith("#"))
    code = " ".join([lesson.MACHINE, lesson.OVER_RANKS])
    for scale in re.findall(r"@(\d+)", text):
        assert f"@{scale}" in code, f"lab 03's text names @{scale}; its machines are {code}"
    assert not re.search(r"\b(ten|twenty|\d+) times slower\b", text)
