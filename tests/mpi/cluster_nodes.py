"""Run on every rank of a job across a cluster's nodes: what each rank is told about its node (host name,
ringlab's node of every rank, ranks per node, local rank, the GPU it binds; the stand-in for cupy when it is on
the path) and the allreduce results; rank 0 prints one JSON line."""
import json
import os
import socket

import numpy as np
from mpi4py import MPI

import ringlab as rl
from ringlab.mpi import nodes
from ringlab.mpi.devices import bind_device, cupy_module
from ringlab.mpi.nodes import local_comm

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
device = bind_device()
cp = cupy_module()
mine = {"rank": rank, "host": socket.gethostname(), "processor": MPI.Get_processor_name(),
        "local_rank": local_comm(comm).Get_rank(), "device": device,
        "pci": cp.cuda.runtime.deviceGetPCIBusId(device) if cp is not None else None,
        "visible": os.environ.get("CUDA_VISIBLE_DEVICES")}
x = np.arange(100_000, dtype=np.float64) * (rank + 1)
want = np.empty_like(x)
comm.Allreduce(x, want)
same = {name: bool(np.array_equal(rl.allreduce(x, name, timeout=60), want)) for name in ("ring", "hierarchical")}
everyone = comm.gather(mine, root=0)
ids, per_node, described = nodes.node_ids(comm), nodes.ranks_per_node(comm), nodes.describe(comm)
if rank == 0:
    print(json.dumps({"ranks": everyone, "ids": ids, "per_node": per_node, "describe": described, "same": same}))
