"""All-to-all with sizes of its own for every pair (MPI's ``Alltoallv``; NCCL has none, and frameworks group one
send and one receive per peer, as ``torch.distributed.all_to_all_single`` with split sizes does): what a dropless
mixture-of-experts layer sends, each rank's tokens to each expert's rank, as many as the router chose.

``rl.alltoallv(x, counts)``: rank r sends ``counts[r][d]`` rows of ``x`` to rank d (``x``'s rows grouped by
destination, in rank order) and gets back the rows every rank sent it, grouped by source in rank order. Every
rank passes the same ``counts``, the whole n x n table: a layer that routes tokens has it anyway (an allreduce of
each rank's row), and with it every rank knows what it will receive without asking.

It runs the pairwise exchange that ``alltoall.pairwise`` runs with equal blocks: n-1 rounds, round k sending to
rank r+k and receiving from rank r-k (mod n), one message each way a round, so a round takes as long as its
largest message. The ranks agree on the call first (the table, the dtype, the row shape, and what is wrong on any
rank) as every ringlab call does, so a mistake on one rank is the same ValueError on every rank; a round that
does not finish within the deadline is a StepTimeout naming the round and the peer.

On an emulated machine (``rl.emulate``) each round's n messages share the links they cross
(:func:`ringlab.mpi.emulate.message_times`, from the table every rank holds), and each message's arrival on its
sender's clock travels beside it as a stamp; as in a schedule's step, a send is done when it has arrived, and a
receive no sooner than that arrival nor than the message's own time from the round's start on the receiver's
clock (its link takes one round's message after the other's). The call's own copies and bookkeeping count nothing.
"""
from __future__ import annotations

import time

import numpy as np

from . import emulate, private
from .deadlines import DEFAULT, StepTimeout, seconds, wait_all
from .devices import array_module, is_device_array

DATA_TAG, STAMP_TAG = 0, 1  # on ringlab's private duplicate of the communicator: a call's rows, and their arrival


def alltoallv(x, counts, comm=None, *, agree: bool = True, timeout=DEFAULT) -> np.ndarray:
    """Rank r sends ``counts[r][d]`` rows of ``x`` to rank d; returns what rank r received, grouped by source.

    ``x``: a numpy or cupy array whose first axis holds ``sum(counts[r])`` rows, those for rank 0 first, then rank 1's,
    and so on (a rank's rows for itself stay home). ``counts``: the n x n table of whole numbers >= 0, the same
    on every rank. Returns an array of ``sum(counts[:, r])`` rows shaped like ``x``'s, rank 0's first. Call on
    every rank of ``comm`` (default: MPI.COMM_WORLD). A cupy array is staged through host memory (to the host,
    exchanged, back to its GPU), and the result is a cupy array on the same GPU.
    """
    ticking = None
    if emulate.possible():  # on an emulated machine the learner's compute ends here: the rest is the call's own
        cpu = time.thread_time()
        if emulate.current() is not None:
            ticking = emulate.clock()
            ticking.enter(cpu)
    try:
        return _call(x, counts, comm, agree, timeout)
    finally:
        if ticking is not None:
            ticking.leave()


def _call(x, counts, comm, agree: bool, timeout) -> np.ndarray:
    from mpi4py import MPI

    what = "rl.alltoallv"
    comm = MPI.COMM_WORLD if comm is None else comm
    with private.entered(comm, what, timeout) as state:
        dup, limit = state.comm(what, None), seconds(timeout)
        n, rank = dup.Get_size(), dup.Get_rank()
        table, problems = _checked(x, counts, n, rank)
        if agree:
            fields = {"collective": "alltoallv", "counts": table.tolist() if table is not None else repr(counts),
                      "dtype": str(getattr(x, "dtype", "-")), "row": list(getattr(x, "shape", (0,))[1:]),
                      "emulation": emulate.describe(), "problems": problems}
            text = private.as_text(fields)
            private.agree(state, what, text, private.digest(text), limit)
        if problems:
            raise ValueError(f"{what}: {'; '.join(problems)}")
        if not is_device_array(x):
            return _exchange(x, table, dup, rank, n, limit)
        cp = array_module(x)  # a GPU array: staged through host memory, on the GPU that holds it
        with x.device:
            host = cp.asnumpy(x)  # blocking: x's pending work is done, and its bytes are here
            out = cp.asarray(_exchange(host, table, dup, rank, n, limit))
            cp.cuda.get_current_stream().synchronize()  # the result is on the GPU when the call returns
        return out


def _checked(x, counts, n: int, rank: int) -> tuple[np.ndarray | None, list[str]]:
    """The table as int64, and what is wrong with this rank's arguments (empty: nothing)."""
    problems = []
    if type(x) is not np.ndarray and not is_device_array(x):
        kind = type(x).__module__.split(".", 1)[0]
        hint = (": pass t.numpy() (on the CPU) or cupy.from_dlpack(t) (on a GPU), which share its memory"
                if kind == "torch" else "")
        problems.append(f"x must be a numpy or cupy array, got {type(x).__name__}{hint}")
    elif x.ndim < 1:
        problems.append("x must have at least one axis (its rows)")
    elif x.dtype.hasobject:
        problems.append(f"x holds Python objects ({x.dtype}); give it a numeric dtype")
    try:
        table = np.asarray(counts)
    except Exception:  # a ragged list, say
        return None, problems + [f"counts must be an {n} x {n} table of whole numbers, got {counts!r}"[:300]]
    if table.shape != (n, n) or not np.issubdtype(table.dtype, np.integer):
        return None, problems + [f"counts must be an {n} x {n} table of whole numbers (one row a sending rank), got "
                                 f"shape {table.shape} of {table.dtype}"]
    table = table.astype(np.int64)
    if (table < 0).any():
        problems.append(f"counts must be >= 0, got {int(table.min())}")
    elif not problems and x.shape[0] != table[rank].sum():
        problems.append(f"rank {rank}'s x has {x.shape[0]} rows, but its row of counts sends {int(table[rank].sum())}")
    return table, problems


def _exchange(x: np.ndarray, table: np.ndarray, comm, rank: int, n: int, limit: float | None) -> np.ndarray:
    """The pairwise rounds (see the module's docstring)."""
    row_bytes = x.dtype.itemsize * int(np.prod(x.shape[1:], dtype=np.int64))
    source = np.ascontiguousarray(x).reshape(-1).view(np.uint8)
    out = np.empty((int(table[:, rank].sum()), *x.shape[1:]), x.dtype)
    landing = out.reshape(-1).view(np.uint8)
    sent_at = np.concatenate(([0], np.cumsum(table[rank]))) * row_bytes  # byte offsets of x's block for each rank
    got_at = np.concatenate(([0], np.cumsum(table[:, rank]))) * row_bytes  # and of out's block from each rank
    landing[got_at[rank]:got_at[rank + 1]] = source[sent_at[rank]:sent_at[rank + 1]]
    machine = emulate.current()
    deadline = None if limit is None else time.monotonic() + limit
    stamp_out, stamp_in = np.zeros(1), np.zeros(1)
    for k in range(1, n):
        to, frm = (rank + k) % n, (rank - k) % n
        requests = [comm.Irecv(landing[got_at[frm]:got_at[frm + 1]], source=frm, tag=DATA_TAG),
                    comm.Isend(source[sent_at[to]:sent_at[to + 1]], dest=to, tag=DATA_TAG)]
        if machine is not None:  # every round's messages at once, sharing the links they cross
            times = emulate.message_times([(q, (q + k) % n, int(table[q, (q + k) % n]) * row_bytes)
                                           for q in range(n)], comm)
            start = emulate.clock().now()
            stamp_out[0] = start + times.get((rank, to), 0.0)
            requests += [comm.Irecv(stamp_in, source=frm, tag=STAMP_TAG), comm.Isend(stamp_out, dest=to, tag=STAMP_TAG)]

        def late(k=k, to=to, frm=frm, requests=requests) -> str:
            waiting = []
            if not requests[0].Test():
                waiting.append(f"to receive {_rows(table[frm, rank])} from rank {frm}")
            if not requests[1].Test():
                waiting.append(f"for rank {to} to take {_rows(table[rank, to])}")
            return (f"rank {rank}: rl.alltoallv round {k} of {n - 1} did not finish within {limit:g} s: still waiting "
                    + (" and ".join(waiting) or "for the arrival times of an emulated machine's messages"))

        try:
            wait_all(requests, deadline, late)
        except StepTimeout as err:
            err.peers = tuple(sorted({peer for peer, request in ((frm, requests[0]), (to, requests[1]))
                                      if not request.Test()} or {to, frm}))
            raise
        if machine is not None:  # as a schedule's step: a send is done when it has arrived, and a receive no
            # sooner than its arrival on the sender's clock nor than this rank's own time for it from the round's start
            emulate.clock().at_least(max(float(stamp_out[0]), float(stamp_in[0]), start + times.get((frm, rank), 0.0)))
    return out


def _rows(count) -> str:
    return f"{int(count)} row{'' if count == 1 else 's'}"
