"""ipyparallel MPI engines for the labs: ordered by rank, an exception on one rank ends the cell at
once instead of hanging it, and the helper restarts and always stops cleanly."""
import subprocess
import sys
import time

import pytest

pytest.importorskip("ipyparallel", reason="ipyparallel is not installed (the lab extra)")

from ringlab.lab.cluster import MPICluster  # noqa: E402


@pytest.mark.timeout(240)
def test_ranks_collective_abort_and_restart():
    with MPICluster(3, activate=False) as ranks:
        ranks.view.execute("from mpi4py import MPI\nme = MPI.COMM_WORLD.Get_rank()", block=True)
        assert ranks.view.pull("me", block=True) == [0, 1, 2]  # the view is ordered by rank
        code = ("import numpy as np, ringlab as rl\n"
                "from mpi4py import MPI\n"
                "total = rl.allreduce(np.full(5, MPI.COMM_WORLD.Get_rank() + 1.0))\n")
        ranks.view.execute(code, block=True)
        assert ranks.pull_rank0("total").tolist() == [6.0] * 5
        ranks.view.execute("mine = 10 * me", block=True)
        me, mine = ranks.pull_rank0("me", "mine")  # rank 0's values, not another rank's
        assert (me, mine) == (0, 0)
        assert ranks.pull_rank0("me", "total")[1].tolist() == [6.0] * 5
        with pytest.raises(ValueError, match="at least one"):
            ranks.pull_rank0()
        failing = ("from mpi4py import MPI\nimport numpy as np\n"
                   "if MPI.COMM_WORLD.Get_rank() == 1:\n    raise RuntimeError('boom on rank 1')\n"
                   "MPI.COMM_WORLD.Allreduce(np.ones(3), np.empty(3))\n")
        start = time.monotonic()
        with pytest.raises(Exception, match="died"):
            ranks.view.execute(failing, block=False).get(timeout=60)
        assert time.monotonic() - start < 10  # not a hang until some timeout
        ranks.restart()
        assert ranks.alive()
        ranks.view.execute("seven = 7", block=True)
        assert ranks.view.pull("seven", block=True) == [7, 7, 7]
    assert ranks.client is None


def test_engines_are_gone_after_the_process_exits():
    """atexit stops the cluster even when the program forgets to."""
    code = ("from ringlab.lab.cluster import MPICluster\nMPICluster(2, activate=False).start()\nprint('started')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0 and "started" in done.stdout, done.stderr[-2000:]
    leftover = subprocess.run(["pgrep", "-f", "ipyparallel.engine"], capture_output=True, text=True)
    assert leftover.stdout.strip() == ""
