"""Every rank prints long lines at once (the runner's streams must send each line whole)."""
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
for i in range(200):
    comm.Barrier()  # every rank prints the same line at the same moment
    print(f"rank {rank}: line {i} " + "x" * 300, flush=True)
