"""argv[1]: a JSON list of values. Each goes, on every rank alike, into real calls as a timeout, a root
and a segment count (skipped where it is a valid value there). Rank 0 prints one JSON row a call: what
each rank raised (its type and words, the rank's own number taken out) and how long it took."""
import json
import math
import re
import sys
import time

import numpy as np
from mpi4py import MPI

import ringlab as rl

comm = MPI.COMM_WORLD
rank = comm.Get_rank()


def valid_timeout(v) -> bool:
    return v is None or v == "default" or (isinstance(v, (int, float)) and not isinstance(v, bool)
                                           and 0 < v < math.inf)


def whole(v, low: int, high: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and low <= v <= high


CALLS = [
    ("allreduce timeout", lambda v: rl.allreduce(np.ones(5), timeout=v), valid_timeout),
    ("reduce root", lambda v: rl.reduce(np.ones(5), root=v), lambda v: whole(v, 0, comm.Get_size() - 1)),
    ("broadcast root", lambda v: rl.broadcast(np.ones(5), root=v), lambda v: whole(v, 0, comm.Get_size() - 1)),
    ("broadcast segments", lambda v: rl.broadcast(np.ones(5), segments=v), lambda v: v is None or whole(v, 1, 1 << 40)),
]

rl.allreduce(np.ones(2))  # ringlab's private communicator, with everyone there
for value in json.loads(sys.argv[1]):
    for what, call, fine in CALLS:
        if fine(value):
            continue
        start = time.monotonic()
        try:
            call(value)
            said = "returned"
        except Exception as err:
            said = re.sub(r"\brank \d+: ", "", f"{type(err).__name__}: {err}")
        took = time.monotonic() - start
        rows = comm.gather((said, took), root=0)
        if rank == 0:
            print(json.dumps({"call": what, "value": repr(value), "said": [s for s, _ in rows],
                              "took": [t for _, t in rows]}), flush=True)
