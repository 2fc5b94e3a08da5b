"""Measuring this machine, and reading measurements made elsewhere.

- ``bench``: a sweep over message sizes in the manner of nccl-tests, every result checked against
  MPI's own collective; ``timing``: the timing loop and nccl-tests' algbw and busbw; ``mpich``: MPICH's
  own settings written while running (its ring allreduce forced, for ``bench -a mpi-ring``);
- ``bandwidth``: memory copy rate and MPI ping-pong; on GPUs host<->device, device and peer copies,
  each next to its link's peak;
- ``machine``: the description that travels with every result; ``recorded``: results measured on
  a GPU machine and committed under ``results/``; ``doctor``: what this machine has;
- ``copies``: one core's memory copy against MPI's messages size for size, and a staged message taken apart;
- ``sweep``: a measured allreduce sweep read back (where the ring overtakes naive, measured and fitted);
- ``latency``: a fitted per-step alpha set against one raw MPI message measured in the same run;
- ``tables``: aligned text tables with each column's unit in its header;
- ``units``: sizes as people type and read them (``64M``, ``1.5 KiB``);
- ``logs``: the NVIDIA tools' output read into ringlab's structures; ``published``: measurements of real
  machines shipped as data; ``explain``: a sweep against healthy hardware of its kind, and the cause
  it matches when it falls short (``ringlab explain``).
"""
