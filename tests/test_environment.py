"""The ways of installing ringlab agree: pyproject.toml, environment.yml, binder/, README, CI."""
import re
import stat
import sys
from pathlib import Path

import yaml
from packaging.requirements import Requirement

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
EXTRAS_IN_CONDA = ("mpi", "lab", "test", "train")  # gpu is left out: the cupy build depends on the CUDA version
CONDA_NAMES = {"torch": "pytorch"}  # PyPI name -> conda-forge name, where they differ


def pyproject_requirements() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = list(project["dependencies"])
    for extra in EXTRAS_IN_CONDA:
        lines += project["optional-dependencies"][extra]
    wanted = {}
    for line in lines:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate({"python_version": "3.13"}):
            continue  # a backport for old Pythons only
        wanted[CONDA_NAMES.get(req.name.lower(), req.name.lower())] = str(req.specifier)
    return wanted


def conda_requirements(path: Path) -> dict[str, str]:
    spec = yaml.safe_load(path.read_text())
    assert spec["channels"] == ["conda-forge"]
    found = {}
    for dep in spec["dependencies"]:
        assert isinstance(dep, str), f"{path.name}: unexpected entry {dep!r}"
        name, version = re.fullmatch(r"([A-Za-z0-9_.\-]+)\s*(.*)", dep).groups()
        found[name.lower()] = version.replace(" ", "")
    return found


def test_environment_yml_matches_pyproject():
    found = conda_requirements(ROOT / "environment.yml")
    assert found.pop("python") == ">=3.10"
    found.pop("pip")
    assert found == pyproject_requirements()


def test_binder_environment_matches_the_root_one():
    assert conda_requirements(ROOT / "binder" / "environment.yml") == conda_requirements(ROOT / "environment.yml")


def test_binder_postbuild_installs_ringlab_and_stops_on_errors():
    post = ROOT / "binder" / "postBuild"
    lines = [line.strip() for line in post.read_text().splitlines()]
    assert lines[0].startswith("#!") and "set -e" in lines
    assert any(re.fullmatch(r"pip install .*(-e )?\.", line) for line in lines)
    assert post.stat().st_mode & stat.S_IXUSR


def test_requires_python_matches():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == ">=3.10"


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    commands = re.findall(r"^(python3 dev\.py \w+)", readme, flags=re.M)
    assert "python3 dev.py lab" in commands and "python3 dev.py test" in commands
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert "python3 dev.py test" in ci


def test_notebooks_are_committed_without_outputs():
    import nbformat

    for path in sorted((ROOT / "labs").glob("**/*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        for cell in notebook.cells:
            if cell.cell_type == "code":
                assert not cell.outputs and cell.execution_count is None, f"{path.name} has outputs"


def test_an_exercise_notebook_runs_once_in_the_browser_or_else_under_nbval():
    """The root conftest leaves an exercise notebook to the browser test's Run All when that test is collected and
    can run, and to nbval otherwise: never to neither (-k taking the browser test away gives it back to nbval)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).parents[1]

    def collected(*args):
        done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:randomly",
                               "labs/03_allreduce.ipynb", "labs/solutions/03_allreduce.ipynb", "tests/test_browser.py",
                               *args], cwd=root, capture_output=True, text=True, timeout=120)
        return [line for line in done.stdout.splitlines() if "::" in line]

    import importlib.util
    spec = importlib.util.spec_from_file_location("root_conftest", root / "conftest.py")
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    everything = collected()
    exercise_cells = [line for line in everything if line.startswith("labs/03_allreduce.ipynb::")]
    browser = [line for line in everything if "runs_all_in_a_real_browser[03_allreduce]" in line]
    assert any(line.startswith("labs/solutions/03_allreduce.ipynb::") for line in everything)
    if conftest._browser_can_run():
        assert browser and not exercise_cells
    else:
        assert exercise_cells
    without_browser = collected("-k", "not browser")
    assert any(line.startswith("labs/03_allreduce.ipynb::") for line in without_browser)


def test_dev_writes_the_bytecode_python_would_not(tmp_path, monkeypatch):
    """Where PYTHONDONTWRITEBYTECODE is set, no process writes the bytecode of ringlab's modules, and each compiles
    them again: dev.py writes it before the suite (or the lab) starts, and only where a source is newer."""
    import importlib.util
    import os
    import subprocess

    spec = importlib.util.spec_from_file_location("dev", ROOT / "dev.py")
    dev = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dev)
    for part in ("ringlab", "tests", "benchmarks"):
        (tmp_path / part).mkdir()
        (tmp_path / part / "module.py").write_text("VALUE = 1\n")
    monkeypatch.setattr(dev, "ROOT", tmp_path)
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    dev.compile_sources(sys.executable)
    cached = Path(importlib.util.cache_from_source(str(tmp_path / "ringlab" / "module.py")))
    assert cached.exists() and all((tmp_path / part / "__pycache__").is_dir() for part in ("tests", "benchmarks"))
    source = tmp_path / "ringlab" / "module.py"  # the same size and time, another value: only the bytecode says 1
    before = source.stat()
    source.write_text("VALUE = 2\n")
    os.utime(source, ns=(before.st_atime_ns, before.st_mtime_ns))
    loaded = subprocess.run([sys.executable, "-c", "import module; print(module.VALUE)"], cwd=source.parent,
                            capture_output=True, text=True, timeout=60, env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    assert loaded.stdout.strip() == "1", loaded.stderr
    assert "compile_sources(" in (ROOT / "dev.py").read_text().split("def main(")[1]  # main calls it
