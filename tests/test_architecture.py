"""The architecture holds: one folder per part, no import cycle between parts, the public names work."""
from __future__ import annotations

import ast
import inspect
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "ringlab"

CORE = ("schedule", "simulate", "algorithms")  # the data model: one part in three places
PARTS = ("mpi", "cluster", "topology", "predict", "measure", "train", "viz", "lab", "lessons")
ENTRY_POINTS = ("cli", "__init__", "__main__")  # ringlab's own: they may import anything
LAYOUT = {"schedule.py", "simulate.py", "algorithms", "mpi", "cluster", "topology", "predict", "measure", "train", "viz",
          "lab", "lessons", "cli.py", "__init__.py", "__main__.py", "data"}


def module_name(path: Path, package: Path) -> str:
    """``ringlab/mpi/run.py`` -> ``ringlab.mpi.run``; a package's ``__init__.py`` is the package."""
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    return {module_name(p, package): p for p in sorted(package.rglob("*.py")) if "__pycache__" not in p.parts}


def part_of(module: str) -> str:
    """The part a module of ringlab belongs to; ``entry`` for the package's own entry points."""
    top = module.split(".")[1] if "." in module else "__init__"
    if top in CORE:
        return "core"
    if top in PARTS:
        return top
    assert top in ENTRY_POINTS, f"{module} belongs to no part"
    return "entry"


def imports(module: str, path: Path, known: dict[str, Path]) -> list[tuple[int, str]]:
    """(line, imported ringlab module) for every import in ``path``, at module level or inside functions."""
    is_package = path.name == "__init__.py"
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names
                      if alias.name == "ringlab" or alias.name.startswith("ringlab.")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[:len(base) - (node.level - 1)] if is_package else base[:len(base) - node.level]
                base = ".".join(base + ([node.module] if node.module else []))
            elif node.module == "ringlab" or (node.module or "").startswith("ringlab."):
                base = node.module
            else:
                continue
            for alias in node.names:  # `from . import ring` imports a module; `from .x import name` imports x
                found.append((node.lineno, f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base))
    return found


def part_graph(package: Path = PACKAGE) -> dict[str, dict[str, list[str]]]:
    """{part: {part it imports: ["ringlab/x.py:12 imports ringlab.y", ...]}}, entry points left out.

    Importing ``ringlab`` itself runs its ``__init__``, so it counts as importing what that imports.
    """
    known = modules(package)
    top_level = [target for _, target in imports("ringlab", known["ringlab"], known) if target != "ringlab"]
    graph: dict[str, dict[str, list[str]]] = {}
    for module, path in known.items():
        mine = part_of(module)
        if mine == "entry":
            continue
        for line, target in imports(module, path, known):
            where = f"{path.relative_to(package.parent)}:{line} imports {target}"
            for reached in (top_level if target == "ringlab" else [target]):
                theirs = part_of(reached)
                if theirs == mine:
                    continue
                evidence = graph.setdefault(mine, {}).setdefault(theirs, [])
                if where not in evidence:
                    evidence.append(where)
    return graph


def find_cycle(graph: dict[str, dict[str, list[str]]]) -> list[str] | None:
    """Some cycle of parts, as [a, b, ..., a], or None."""
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for nxt in sorted(graph.get(node, {})):
            if state.get(nxt) == "open":
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        state[node] = "done"
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_every_module_belongs_to_a_part():
    assert {part_of(m) for m in modules()} <= {"core", "entry", *PARTS}


def test_the_parts_import_each_other_without_a_cycle():
    graph = part_graph()
    assert graph, "no imports between parts found: the import walk is broken"
    cycle = find_cycle(graph)
    if cycle:
        hops = [f"{a} -> {b}:\n    " + "\n    ".join(graph[a][b]) for a, b in zip(cycle, cycle[1:])]
        raise AssertionError("the parts import each other in a cycle, " + " -> ".join(cycle) + "\n"
                             + "\n".join(hops))


def module_graph(package: Path = PACKAGE) -> dict[str, dict[str, list[str]]]:
    """{module: {ringlab module it imports: ["ringlab/x.py:12", ...]}}: every import, at module level or in a
    function; a package's ``__init__`` importing its own modules is how packages load, and left out."""
    known = modules(package)
    graph: dict[str, dict[str, list[str]]] = {}
    for module, path in known.items():
        for line, target in imports(module, path, known):
            if target != module and not (path.name == "__init__.py" and target.startswith(module + ".")):
                graph.setdefault(module, {}).setdefault(target, []).append(f"{path.relative_to(package.parent)}:{line}")
    return graph


def test_no_module_imports_one_that_imports_it_back():
    """Dependencies inside a folder run one way (``transports`` binds the plans that ``run`` carries out, and
    ``run`` never imports it back), at import time or at call time."""
    graph = module_graph()
    cycle = find_cycle(graph)
    if cycle:
        hops = [f"{a} -> {b}: " + ", ".join(graph[a][b]) for a, b in zip(cycle, cycle[1:])]
        raise AssertionError("modules import each other in a circle, " + " -> ".join(cycle) + "\n" + "\n".join(hops))


def test_the_module_walk_finds_a_circle_made_at_call_time(tmp_path):
    files = {"__init__.py": "", "mpi/__init__.py": "from . import a\n", "mpi/a.py": "from .b import f\n",
             "mpi/b.py": "def f():\n    from .a import g\n"}
    for name, text in files.items():
        (tmp_path / "ringlab" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "ringlab" / name).write_text(text)
    assert find_cycle(module_graph(tmp_path / "ringlab")) == ["ringlab.mpi.a", "ringlab.mpi.b", "ringlab.mpi.a"]


def test_the_import_walk_sees_every_kind_of_import(tmp_path):
    files = {
        "__init__.py": "from .predict import predict\n",
        "schedule.py": "",
        "mpi/__init__.py": "from ..schedule import Step\n",                        # relative, module level
        "topology/__init__.py": "from . import graph\n",
        "topology/graph.py": "def f():\n    from ringlab.viz import plots\n",     # absolute, in a function
        "predict/__init__.py": "from .. import topology\n",                       # `from .. import` a package
        "viz/plots.py": "def g():\n    import ringlab\n",                        # ringlab itself
        "lab/demo.py": "import ringlab.mpi\nfrom ringlab import train\n",
        "train/__init__.py": "import numpy\n",
    }
    for name, text in files.items():
        (tmp_path / "ringlab" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "ringlab" / name).write_text(text)
    graph = part_graph(tmp_path / "ringlab")
    assert {part: set(theirs) for part, theirs in graph.items()} == {
        "mpi": {"core"}, "topology": {"viz"}, "predict": {"topology"}, "viz": {"predict"}, "lab": {"mpi", "train"}}
    assert graph["topology"]["viz"] == ["ringlab/topology/graph.py:2 imports ringlab.viz.plots"]
    assert graph["viz"]["predict"] == ["ringlab/viz/plots.py:2 imports ringlab"]
    assert find_cycle(graph) == ["predict", "topology", "viz", "predict"]
    assert find_cycle({"a": {"b": []}, "b": {}}) is None


def test_ls_ringlab_shows_the_parts():
    shown = {p.name for p in PACKAGE.iterdir() if p.name != "__pycache__" and not p.name.startswith(".")}
    assert shown == LAYOUT, f"not a part: {sorted(shown - LAYOUT)}; missing: {sorted(LAYOUT - shown)}"


def test_every_folder_says_what_it_holds():
    folders = [PACKAGE] + sorted(p for p in PACKAGE.iterdir() if p.is_dir() and p.name not in ("data", "__pycache__"))
    for folder in folders:
        init = folder / "__init__.py"
        assert init.exists(), f"{folder.relative_to(ROOT)} is not a package"
        assert ast.get_docstring(ast.parse(init.read_text())), f"{init.relative_to(ROOT)} has no docstring"


def test_the_public_names_work():
    import numpy as np

    import ringlab as rl

    for name in ("reduce.direct", "reduce.tree", "reduce.chain", "broadcast.direct", "broadcast.tree",
                 "broadcast.chain", "allreduce.naive", "allreduce.ring", "allreduce.ps"):
        assert isinstance(rl.ALGORITHMS[name](4), rl.Schedule)
    ring = rl.build("allreduce.ring", 4)
    out = rl.simulate(ring, [np.full(8, 10.0 ** r) for r in range(4)])
    assert np.array_equal(out[2], np.full(8, 1111.0))
    assert rl.traffic(ring, 1 << 20) == {"sent": [3 << 19] * 4, "received": [3 << 19] * 4}  # 2(n-1)/n of 1 MiB
    assert inspect.isfunction(rl.predict)
    assert rl.predict(ring, 1 << 20, rl.topology.uniform(4, bandwidth=1e9, latency=0.0)).seconds > 0
    for preset in ("pcie3-switch-4", "dual-socket-qpi-8", "dgx1-v100", "dgx2-nvswitch", "ib-2x4"):
        assert rl.topology.preset(preset).nranks >= 4
    assert callable(rl.topology.discover)
    for collective, params in ((rl.allreduce, ["x", "algorithm", "comm", "transport"]),
                               (rl.reduce, ["x", "root", "algorithm", "comm"]),
                               (rl.broadcast, ["x", "root", "algorithm", "comm", "segments"]),
                               (rl.execute, ["schedule", "x", "comm"])):
        assert list(inspect.signature(collective).parameters)[:len(params)] == params, collective.__name__


def test_train_loads_on_first_use():
    script = ("import sys\nimport ringlab as rl\n"
              "assert 'ringlab.train' not in sys.modules and 'torch' not in sys.modules, 'loaded too early'\n"
              "assert callable(rl.train.DistributedOptimizer) and callable(rl.train.ParameterServer)\n"
              "assert 'ringlab.train' in sys.modules\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_a_rank_imports_only_what_it_runs():
    """Every rank of every job imports ringlab and its benchmark: what those import, each process pays for (the test
    suite starts thousands). Progress bars, plots, notebooks and torch load where they are used."""
    script = ("import sys\nimport ringlab, ringlab.cli, ringlab.measure.bench\n"
              "print(sorted(m for m in ('tqdm', 'torch', 'plotly', 'ipywidgets', 'ipyparallel', 'IPython', 'asyncio') "
              "if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", f"loaded by a bare import: {done.stdout}"


def test_the_command_line_lists_its_commands():
    done = subprocess.run([sys.executable, "-m", "ringlab", "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    listed = set(re.findall(r"^ {4}(\w+)", done.stdout, flags=re.M))
    assert {"bench", "bandwidth", "demo", "doctor", "predict"} <= listed, done.stdout
