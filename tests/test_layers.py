"""ringlab.mpi is layers that a call passes once, top to bottom: nothing imports up, and the array of
``rl.allreduce(x)``, followed through the code on real ranks, goes down through each layer once and its result
comes back once."""
from __future__ import annotations

import ast
import json

import pytest

from gpusim_support import SCRIPTS, run_gpusim
from ringlab.cluster.launch import run_mpi
from test_architecture import PACKAGE, module_graph, modules

# top to bottom: a module imports only modules of its own layer or of the layers below it
MPI_LAYERS = (("collectives",), ("plan",), ("transports", "ipc", "emulate", "symmetric"), ("run",))
MPI_UTILITIES = ("private", "deadlines", "devices", "nodes", "reduction")  # used by every layer; import none
MOST_MODULES = 13  # in ringlab/mpi/, its __init__ counted (the 13th: the shared window of one-shot and two-shot)
MOST_ENTERED = 8   # modules the array of rl.allreduce(x) enters, utilities counted


def depth() -> dict[str, int]:
    """Each module of ringlab.mpi and its layer's depth (the utilities below every layer)."""
    found = {f"ringlab.mpi.{m}": i for i, layer in enumerate(MPI_LAYERS) for m in layer}
    found.update({f"ringlab.mpi.{m}": len(MPI_LAYERS) for m in MPI_UTILITIES})
    return found


def test_every_module_of_mpi_is_in_one_layer_and_there_are_few():
    here = {m for m in modules() if m.startswith("ringlab.mpi.")}
    assert here == set(depth()), f"in no layer: {sorted(here - set(depth()))}; gone: {sorted(set(depth()) - here)}"
    files = sorted((PACKAGE / "mpi").glob("*.py"))
    assert len(files) <= MOST_MODULES, [f.name for f in files]
    assert not [p for p in (PACKAGE / "mpi").iterdir() if p.is_dir() and p.name != "__pycache__"], "a folder in mpi/"


def test_no_module_of_mpi_imports_a_layer_above_its_own():
    layer, graph = depth(), module_graph()
    upward = [f"{module} imports {target} ({', '.join(where)})"
              for module in layer for target, where in graph.get(module, {}).items()
              if target in layer and layer[target] < layer[module]]
    assert not upward, "\n".join(upward)


def test_the_layering_check_sees_an_import_up(tmp_path):
    files = {"__init__.py": "", "mpi/__init__.py": "", "mpi/run.py": "def f():\n    from .plan import g\n",
             "mpi/plan.py": "from .run import f\n"}
    for name, text in files.items():
        (tmp_path / "ringlab" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "ringlab" / name).write_text(text)
    graph = module_graph(tmp_path / "ringlab")
    layer = depth()
    assert [t for t in graph["ringlab.mpi.run"] if layer[t] < layer["ringlab.mpi.run"]] == ["ringlab.mpi.plan"]


def test_starting_jobs_and_the_cluster_live_outside_mpi():
    """mpi/ only runs schedules on ranks it is given: it starts no job (no Popen, no mpiexec found or run) and
    imports nothing of ringlab.cluster."""
    graph = module_graph()
    launching = {"Popen", "find_mpiexec", "run_mpi", "relaunch", "mpiexec_command"}
    for module, path in modules().items():
        if module.startswith("ringlab.mpi"):
            names = {getattr(node, "attr", getattr(node, "id", None)) for node in ast.walk(ast.parse(path.read_text()))}
            assert not names & launching, f"{module} uses {sorted(names & launching)}"
            assert not [t for t in graph.get(module, {}) if t.startswith("ringlab.cluster")], module
    assert {"ringlab.cluster.launch", "ringlab.cluster.runner", "ringlab.cluster.control"} <= set(modules())


def walks(done) -> dict[str, dict]:
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    found = {w["case"]: w for w in map(json.loads, (line for line in done.stdout.splitlines() if line.startswith("{")))}
    assert found, done.stdout
    return found


def down_once_and_back(walk: dict) -> None:
    """The stays are the layers, top to bottom, each once, then the way back up with the result."""
    stays = [module.rsplit(".", 1)[-1] for module, _ in walk["stays"]]
    down = [m for layer in MPI_LAYERS for m in layer if m in stays]
    assert stays == down + down[-2::-1], f"{walk['case']}: {' > '.join(stays)}"
    assert down[0] == "collectives" and down[-1] == "run", walk
    assert [layer for layer in MPI_LAYERS if set(layer) & set(down)] == list(MPI_LAYERS), walk  # each layer once
    assert len(walk["entered"]) <= MOST_ENTERED, walk["entered"]
    assert all(m.startswith("ringlab.mpi.") for m in walk["entered"]), walk["entered"]


@pytest.mark.parametrize("nranks", [2, 3])
def test_the_array_of_an_allreduce_goes_down_each_layer_once_and_comes_back_once(nranks):
    done = run_mpi(nranks, [str(SCRIPTS / "data_path.py"), "numpy", "auto", ",".join(MPI_UTILITIES)], timeout=180)
    found = walks(done)
    assert {"first call", "the same call again", "out=", "in place", "op=avg", "trace=True", "naive",
            "emulated"} <= set(found)
    for walk in found.values():
        down_once_and_back(walk)
    # the way a repeated numpy call takes, and the way of everything else, are both this one way down
    assert [f for _, f in found["the same call again"]["stays"][:4]] == ["allreduce", "run", "move", "run"]
    assert [f for _, f in found["trace=True"]["stays"][:4]] == ["allreduce", "run_schedule", "move", "run"]


@pytest.mark.gpusim
@pytest.mark.parametrize("transport,options", [("host", {}), ("cuda-aware", {"cuda_aware": True}), ("ipc", {}),
                                               ("auto", {"RINGLAB_RANKS_PER_NODE": "1"})])
def test_a_device_array_goes_the_same_way_down_by_every_transport(transport, options):
    """Staged through the host, handed to a CUDA-aware MPI, read over CUDA IPC, or IPC inside simulated nodes of
    one rank and MPI between them: the same layers, once each."""
    done = run_gpusim(2, [str(SCRIPTS / "data_path.py"), "cupy", transport, ",".join(MPI_UTILITIES)], timeout=180,
                      **options)
    for walk in walks(done).values():
        down_once_and_back(walk)
