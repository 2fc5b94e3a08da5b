"""What the notebooks need and nothing else does.

- ``exercises``: checks that run a learner's answer through ringlab and say what is wrong;
- ``cluster``: :class:`MPICluster`, MPI ranks as ipyparallel engines for ``%%px`` cells;
- ``notebooks``: the labs' jupytext sources, the exercise and solution notebooks built from them,
  and their ``%%px`` cells as one script for mpiexec (``python -m ringlab.lab build|check|script``);
- ``demo``: a terminal walk-through of one collective (``ringlab demo``);
- ``tables``: :func:`~ringlab.lab.tables.table`, the labs' aligned text tables with units in the headers;
- ``sweep``: a measured allreduce sweep read back in sentences computed from it, and where the ring
  overtakes naive, measured and fitted.
"""
