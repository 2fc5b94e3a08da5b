"""MPICH's own settings, read and written while the job runs (the MPI tool interface, MPI_T).

MPICH picks each collective's algorithm by itself; its control variables (CVARs, listed by the
``mpivars`` program beside ``mpiexec``) force one. ``ringlab bench -a mpi-ring`` times MPICH's
ring allreduce, the same algorithm as ``allreduce.ring`` written in C, by writing, for the time
of that measurement only:

- ``MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM = ring`` (MPICH's ``allreduce_intra_ring``), and
- ``MPIR_CVAR_DEVICE_COLLECTIVES = none``, so the ch4 device does not substitute a choice of its own.

:func:`forced_allreduce` checks that the setting took effect, not only that it was written: with
``MPIR_CVAR_COLLECTIVE_FALLBACK = error``, MPICH refuses an allreduce with a non-commutative
operation when the ring is forced (its ring needs a commutative one) and runs it otherwise; so a
refusal shows that the forced algorithm is the one MPICH uses. The values are MPICH's enumeration
order as ``mpivars`` prints it (ring is 8 in MPICH 4.x and 5.x); the check catches a release that
numbers them otherwise.
"""
from __future__ import annotations

import ctypes
from contextlib import contextmanager

ALLREDUCE_ALGORITHMS = {"auto": 0, "nb": 1, "smp": 2, "recursive_doubling": 3, "recursive_multiplying": 4,
                        "reduce_scatter_allgather": 5, "tree": 6, "recexch": 7, "ring": 8}
DEVICE_COLLECTIVES = {"all": 0, "none": 1, "percoll": 2}
FALLBACK = {"error": 0, "print": 1, "silent": 2}


class NotMPICH(RuntimeError):
    """The MPI library is not MPICH, or it does not let its settings be written while running."""


def _library():
    from mpi4py import MPI

    if "MPICH" not in MPI.Get_library_version():
        raise NotMPICH(f"mpi-ring needs MPICH (the mpich wheel); this MPI is {MPI.Get_library_version().splitlines()[0]}")
    lib = ctypes.CDLL(MPI.__file__)  # mpi4py's extension links libmpi; its symbols are found through it
    provided = ctypes.c_int()
    if lib.MPI_T_init_thread(0, ctypes.byref(provided)) != 0:
        raise NotMPICH("MPI_T_init_thread failed: MPICH's tool interface is not available")
    return lib


class Cvar:
    """One of MPICH's integer control variables, by name."""

    def __init__(self, lib, name: str):
        self.lib, self.name = lib, name
        index = ctypes.c_int()
        if lib.MPI_T_cvar_get_index(name.encode(), ctypes.byref(index)) != 0:
            raise NotMPICH(f"this MPICH has no control variable {name}")
        self.handle, count = ctypes.c_void_p(), ctypes.c_int()
        if lib.MPI_T_cvar_handle_alloc(index, None, ctypes.byref(self.handle), ctypes.byref(count)) != 0:
            raise NotMPICH(f"cannot open MPICH's {name}")

    def read(self) -> int:
        value = ctypes.c_int()
        self.lib.MPI_T_cvar_read(self.handle, ctypes.byref(value))
        return value.value

    def write(self, value: int) -> None:
        if self.lib.MPI_T_cvar_write(self.handle, ctypes.byref(ctypes.c_int(value))) != 0:
            raise NotMPICH(f"MPICH did not let {self.name} be written while running")


def _refuses_non_commutative(comm) -> bool:
    """Whether MPICH, with fallback set to error, refuses an allreduce with a non-commutative operation
    (on every rank: the answers are combined)."""
    import numpy as np
    from mpi4py import MPI

    def keep_left(into, inout, datatype):  # a valid, non-commutative reduction: the lower rank's value
        pass

    op = MPI.Op.Create(keep_left, commute=False)
    try:
        comm.Allreduce(np.ones(8, np.float32), np.empty(8, np.float32), op=op)
        refused = False
    except MPI.Exception:
        refused = True
    finally:
        op.Free()
    return bool(comm.allreduce(refused, op=MPI.LOR))


@contextmanager
def forced_allreduce(comm, algorithm: str = "ring"):
    """Within the block, MPICH's ``MPI_Allreduce`` on ``comm`` runs ``algorithm`` (collective: call on
    every rank); the settings before are restored after. Raises NotMPICH when it cannot be done or
    when MPICH does not use the forced algorithm."""
    lib = _library()
    chosen = Cvar(lib, "MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM")
    device = Cvar(lib, "MPIR_CVAR_DEVICE_COLLECTIVES")
    fallback = Cvar(lib, "MPIR_CVAR_COLLECTIVE_FALLBACK")
    before = chosen.read(), device.read(), fallback.read()
    try:
        chosen.write(ALLREDUCE_ALGORITHMS[algorithm])
        device.write(DEVICE_COLLECTIVES["none"])
        fallback.write(FALLBACK["error"])
        if algorithm == "ring" and not _refuses_non_commutative(comm):
            raise NotMPICH("MPICH was told to use its ring allreduce but did not: the setting did not take effect")
        yield  # with fallback still "error": a call the ring could not take would fail, not run another

    finally:
        chosen.write(before[0])
        device.write(before[1])
        fallback.write(before[2])
