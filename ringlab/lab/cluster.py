"""MPI ranks for notebooks: ipyparallel engines started under mpiexec, and always stopped.

    from ringlab.lab.cluster import MPICluster
    ranks = MPICluster(4).start()     # then %%px cells run on every rank
    ...
    result = ranks.pull_rank0("result")   # what rank 0 computed
    ranks.stop()                      # also at exit, and by `with MPICluster(4) as ranks:`

A rank that raises inside a cell while the others wait in a collective would hang the cell, and
nbval's timeout cannot interrupt it through ipyparallel. So every engine gets an exception hook
that prints the traceback and aborts the whole MPI job: the cell fails at once, and
:meth:`MPICluster.start` (or :meth:`restart`) brings up fresh engines. Engine ids need not equal
MPI ranks: :attr:`MPICluster.view` is ordered by rank.
"""
from __future__ import annotations

import atexit
import os
import sys
from pathlib import Path

_RUNNING: list["MPICluster"] = []


def _abort_on_exception() -> int:
    """Runs on each engine: on any exception in a cell, show it, then abort every rank."""
    import sys as _sys

    from IPython import get_ipython
    from mpi4py import MPI

    def abort(shell, etype, value, tb, tb_offset=None):
        shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
        rank = MPI.COMM_WORLD.Get_rank()
        print(f"ringlab: rank {rank} raised {etype.__name__}: {value}; aborting every rank", file=_sys.stderr)
        _sys.stdout.flush()
        _sys.stderr.flush()
        MPI.COMM_WORLD.Abort(1)

    get_ipython().set_custom_exc((Exception,), abort)
    return MPI.COMM_WORLD.Get_rank()


class MPICluster:
    """``n`` MPI ranks as ipyparallel engines; ``activate=True`` makes ``%%px`` target them."""

    def __init__(self, n: int = 4, activate: bool = True, timeout: float = 120):
        if n < 1:
            raise ValueError(f"need at least 1 rank, got {n}")
        self.n, self.activate, self.timeout = n, activate, timeout
        self._cluster = self.client = self.view = None

    def start(self) -> "MPICluster":
        """Start the engines (stopping any this object started before) and install the abort hook."""
        import ipyparallel as ipp

        self.stop()
        bin_dir = str(Path(sys.executable).parent)  # mpiexec of the mpich wheel sits beside python
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
        self._cluster = ipp.Cluster(engines="mpi", n=self.n, log_level=40)
        self.client = self._cluster.start_and_connect_sync(activate=False)
        self.client.wait_for_engines(self.n, timeout=self.timeout)
        ranks = self.client[:].apply_sync(_abort_on_exception)
        by_rank = [engine for _, engine in sorted(zip(ranks, self.client.ids))]
        self.view = self.client[by_rank]
        self.view.block = True  # %%px waits for every rank, so an error fails its own cell
        if self.activate:
            self.view.activate()
        _RUNNING.append(self)
        return self

    def pull_rank0(self, *names: str):
        """Rank 0's value of one name, or a tuple of rank 0's values of several (where results are gathered)."""
        if not names:
            raise ValueError("name at least one variable to pull")
        if self.view is None:
            raise RuntimeError("the ranks are not running: call start() first")
        values = self.view.pull(list(names), targets=self.view.targets[0], block=True)
        return values[0] if len(names) == 1 else tuple(values)

    def alive(self) -> bool:
        """Whether all engines are still there (an aborted job leaves none)."""
        return self.client is not None and len(self.client.ids) == self.n

    def restart(self) -> "MPICluster":
        return self.start()

    def stop(self) -> None:
        """Stop the engines and the controller; safe to call twice, or after an abort."""
        cluster, self._cluster = self._cluster, None
        if self.client is not None:
            try:
                self.client.close()
            except Exception:
                pass
        self.client = self.view = None
        if cluster is not None:
            try:
                cluster.stop_cluster_sync()
            except Exception:
                pass
        if self in _RUNNING:
            _RUNNING.remove(self)

    def __enter__(self) -> "MPICluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


@atexit.register
def _stop_all() -> None:
    for cluster in list(_RUNNING):
        cluster.stop()
