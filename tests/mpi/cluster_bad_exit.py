"""Run on every rank: after a barrier the last rank leaves with status 3 without MPI_Abort (as a crashed rank
would), and the others sleep for five minutes without touching MPI, so that only the launcher can end them."""
import os
import socket
import time

from mpi4py import MPI

comm = MPI.COMM_WORLD
comm.Barrier()
if comm.Get_rank() == comm.Get_size() - 1:
    print(f"rank {comm.Get_rank()} on {socket.gethostname()}: leaving with status 3", flush=True)
    os._exit(3)
time.sleep(300)
