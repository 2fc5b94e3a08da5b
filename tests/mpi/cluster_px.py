"""Run in a cluster's head: start MPICluster with argv[1]'s launcher ('slurm' or 'ssh') for 4 engines on 2 nodes,
drive it with %%px cells in an IPython shell, and print one JSON line: each rank's host and an allreduce."""
import json
import os
import sys

from IPython.core.interactiveshell import InteractiveShell

from ringlab.lab.cluster import MPICluster

launcher = sys.argv[1]
os.chdir(sys.argv[2])  # ipyparallel's Slurm launcher writes its batch script into the current folder
options = dict(launcher="ssh", hosts={"node1": 2, "node2": 2}) if launcher == "ssh" else dict(
    launcher="slurm", launcher_options={"partition": "ringlab", "options": "--nodes=2 --ntasks-per-node=2"})
shell = InteractiveShell.instance()
with MPICluster(4, timeout=120, shared_dir=sys.argv[2], **options) as ranks:
    shell.run_cell("%%px\nimport socket\nimport numpy as np\nimport ringlab as rl\nfrom mpi4py import MPI\n"
                   "host = socket.gethostname()\nrank = MPI.COMM_WORLD.Get_rank()\n", store_history=True)
    shell.run_cell("%%px\ntotal = rl.allreduce(np.full(1000, rank + 1.0), 'ring', timeout=60)\n"
                   "hosts = MPI.COMM_WORLD.gather(host, root=0)\nok = bool((total == 10.0).all())\n",
                   store_history=True)
    hosts, ok = ranks.pull_rank0("hosts", "ok")
    print(json.dumps({"hosts": hosts, "ok": ok}))
