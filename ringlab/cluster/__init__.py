"""Starting machines and jobs: MPI jobs and torch process groups from Python, and a real cluster on this machine.

Nothing here moves a collective's bytes (that is :mod:`ringlab.mpi`): this part starts the processes that do.

- ``launch``: find ``mpiexec``, run a job of N ranks (``run_mpi``), run a command again as a job of N ranks
  (``relaunch``, for ``ringlab bench -n 4``), and torch.distributed's process group on MPI ranks;
- ``runner``: ``python -m ringlab.cluster.runner SCRIPT``, mpi4py's runner with ringlab's private
  communicator made and every rank bound to its GPU before the script runs (the jobs ringlab starts use it).

The cluster on this machine (``ringlab cluster``): nodes as Linux namespaces joined by kernel-shaped links.
Each node is a network namespace with its own host name (a UTS namespace), joined by a veth pair to a
bridge that lives in a namespace of its own; the kernel's token bucket (``tc ... tbf``) shapes each
link in both directions. A head namespace on the same bridge is where jobs are launched from, and
optionally Slurm runs there (slurmctld, munged) with one slurmd per node. MPI between nodes is forced
onto TCP, so its bytes cross the shaped links. Nothing is made in the machine's own namespace: every
address lives inside namespaces the cluster made, and everything it made carries its prefix. Without root,
where the system allows user namespaces, the whole cluster lives inside one of its own (no Slurm there).

- ``layout``: the cluster's description: names, addresses, paths, its state file and lock;
- ``netns``: namespaces, links and their shaping, running a command on a node, ending what runs there;
- ``slurm``: munge and Slurm's daemons, configured for these nodes;
- ``control``: up, down, status and run, and the checks that say what this machine lacks;
- ``rootless``: the same for an ordinary user, inside a user namespace of the cluster's own;
- ``relay``: under sudo, jobs run as the user who ran it; the run enters the nodes for them;
- ``command``: the ``ringlab cluster`` command line.
"""
