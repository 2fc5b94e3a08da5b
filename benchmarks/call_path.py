"""Where a small call's time goes: one 8-byte allreduce taken apart, layer by layer, measured in one run.

    python benchmarks/call_path.py            # 2 ranks
    python benchmarks/call_path.py -n 3

Each line is the median per call over 7 batches of 3000 calls (the slowest rank's), measured in one MPI job:
MPI's own Allreduce; a bare Isend/Irecv pair (one message each way); the ring's steps alone (the transport
running its bound plan: persistent requests, two steps); the remembered call (the steps, and the result
buffer); the argument agreement alone (entering the call and exchanging digests); ``rl.allreduce`` without and
with the agreement; and one-shot through the shared window: its rounds alone, then the whole call. What a
layer costs is its line less the line under it. Where a layer is a few tenths of a microsecond, it is Python
work (a function call, a dictionary lookup, a numpy scalar), which a profile of one rank shows by name::

    python -m cProfile -s tottime -m ringlab bench ...
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from ringlab.cluster.launch import run_mpi

LAYERS = """
import json, time
import numpy as np
from mpi4py import MPI
import ringlab as rl
from ringlab.measure.timing import per_call_seconds
from ringlab.mpi import private, symmetric

comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
x, out = np.ones(2, np.float32), np.empty(2, np.float32)
right, left = (rank + 1) % n, (rank - 1) % n


def per_call(fn):
    return per_call_seconds(fn, comm, calls=3000, batches=7, warmup=300)


rl.allreduce(x, "ring")  # the remembered call, its plan bound, the agreement's requests made
rl.allreduce(x, "oneshot")  # the window made
state = private.state(comm)
call = next(c for c in private.state(comm).cache["calls"].values() if c.schedule.name == "allreduce.ring")
window = state.cache["symmetric"]
sig = next(iter(state.cache["signatures"].values()))
buffer = x.copy()


def agreement_alone():
    with private.entered(comm, "rl.allreduce", "default") as entered:
        private.agree(entered, "rl.allreduce", call.text, call.digest, 60.0)


def window_alone():
    state.calls += 1
    symmetric.run(state, window, sig, x, out, False, "rl.allreduce", 60.0)


found = {
    "MPI's own Allreduce": per_call(lambda: comm.Allreduce(x, out)),
    "an Isend/Irecv pair": per_call(lambda: MPI.Request.Waitall([comm.Irecv(out, source=left),
                                                                 comm.Isend(x, dest=right)])),
    "the ring's steps (transport.move)": per_call(lambda: call.transport.move(buffer, 60.0, None, "buffer")),
    "the remembered call (call.run)": per_call(lambda: call.run(x, None, False, 60.0)),
    "the agreement alone": per_call(agreement_alone),
    "rl.allreduce ring, agree=False": per_call(lambda: rl.allreduce(x, "ring", agree=False)),
    "rl.allreduce ring": per_call(lambda: rl.allreduce(x, "ring")),
    "one-shot's rounds alone (symmetric.run)": per_call(window_alone),
    "rl.allreduce one-shot": per_call(lambda: rl.allreduce(x, "oneshot")),
}
if rank == 0:
    print(json.dumps(found))
"""


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", "--nranks", type=int, default=2, help="ranks (default 2)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "layers.py"
        script.write_text(LAYERS)
        done = run_mpi(args.nranks, [str(script)], timeout=900)
    if done.returncode != 0:
        sys.exit(f"the layers' timing failed:\n{done.stderr[-3000:]}")
    found = json.loads(done.stdout.strip().splitlines()[-1])
    mpi = found["MPI's own Allreduce"]
    print(f"# an 8-byte allreduce on {args.nranks} ranks, measured here: us per call (the slowest rank's median), "
          "and as a multiple of MPI's own")
    for what, seconds in found.items():
        print(f"  {what:<42} {seconds * 1e6:>8.2f} us {seconds / mpi:>6.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
