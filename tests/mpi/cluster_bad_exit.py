"""Run on every rank: after a barrier the last rank leaves with status 3 without MPI_Abort (as a crashed rank
would), and the others sleep for five minutes without touching MPI, so that only the launcher can end them."""
import os
import socket
import time

from mpi4py import MPI

from ringlab.cluster.runner import unname_shared_memory, unname_topology_file

comm = MPI.COMM_WORLD
comm.Barrier()
unname_shared_memory()  # every rank has finished MPI_Init: the ended job leaves nothing in /dev/shm or /tmp
unname_topology_file()
if comm.Get_rank() == comm.Get_size() - 1:
    print(f"rank {comm.Get_rank()} on {socket.gethostname()}: leaving with status 3", flush=True)
    os._exit(3)
time.sleep(300)
