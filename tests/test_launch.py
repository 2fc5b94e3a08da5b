"""Starting MPI jobs and torch process groups: a command that takes -n runs again on that many ranks
without its -n, and the process group comes up over MPI ranks and goes down cleanly."""
import json

import pytest

from ringlab.mpi.launch import relaunch, run_mpi, without_nranks


@pytest.mark.parametrize("argv, rest", [
    (["bench", "-n", "4", "-a", "ring"], ["bench", "-a", "ring"]),
    (["--nranks", "2", "--json", "out.json"], ["--json", "out.json"]),
    (["-n3", "-c", "reduce"], ["-c", "reduce"]),
    (["--nranks=2", "-b", "8"], ["-b", "8"]),
    (["-b", "8"], ["-b", "8"]),
])
def test_the_rank_count_is_taken_out(argv, rest):
    assert without_nranks(argv) == rest


SHOW_JOB = """
import json, sys
from mpi4py import MPI
everyone = MPI.COMM_WORLD.gather(sys.argv[1:], root=0)
if MPI.COMM_WORLD.Get_rank() == 0:
    print(json.dumps(everyone))
"""


@pytest.mark.timeout(120)
def test_relaunch_runs_the_command_on_n_ranks_without_its_n(tmp_path, capfd):
    script = tmp_path / "show_job.py"
    script.write_text(SHOW_JOB)
    assert relaunch(2, ["--json", "x.json", "-n", "2", "-v"], [str(script)]) == 0
    assert json.loads(capfd.readouterr().out) == [["--json", "x.json", "-v"]] * 2  # every rank's arguments


TORCH_GROUP = """
import torch
import torch.distributed as dist
from mpi4py import MPI
from ringlab.mpi.launch import torch_process_group

rank = MPI.COMM_WORLD.Get_rank()
for attempt in range(3):  # up and down again: each time on a fresh port, each time torn down
    with torch_process_group() as group:
        total = torch.tensor([rank + 1.0])
        group.all_reduce(total)
        assert total.item() == 3.0, total
        with torch_process_group():  # a running group is used as it is and left running
            pass
        assert dist.is_initialized()
    assert not dist.is_initialized()
clean = MPI.COMM_WORLD.gather(rank, root=0)
if rank == 0:
    print("clean", *clean)
"""


@pytest.mark.timeout(200)
def test_torch_process_group_comes_up_over_mpi_ranks_and_goes_down_cleanly():
    pytest.importorskip("torch", reason="torch is not installed (the train extra)")
    done = run_mpi(2, ["-c", TORCH_GROUP], timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "clean 0 1"


def test_the_mpi_package_imports_without_torch():
    code = ("import sys\nsys.modules['torch'] = None  # any import of torch now fails\n"
            "import ringlab.mpi.launch, ringlab.measure.bench\nprint('ok')\n")
    done = run_mpi(1, ["-c", code], timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
