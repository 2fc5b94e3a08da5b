"""Follow the array of ``rl.allreduce(x)`` through ringlab's code: which modules it stays in, in order.

Run on MPI ranks (``python -m ringlab.cluster.runner data_path.py ARRAYS TRANSPORT UTILITIES``): ARRAYS is
numpy or cupy, TRANSPORT the transport asked for, UTILITIES the comma-separated modules of ringlab.mpi that
are utilities. Rank 0 prints one JSON line per case: the call, its stays, and the modules the data entered.

A frame holds the data when one of its local variables at the call (its arguments, and the variables of the
functions it closes over) is ``x`` or the call's result, or an array on their memory, or holds one within
three hops (a container's items, an object's attributes). The data is in the module of the innermost ringlab
frame that holds it; each change of that module is a new stay. A utility is used, not stayed in: a frame of
a utility module that holds the data is counted among the modules entered, but is no stay. ``all_stays``
counts every module as a stay, utilities too, as a walk by hand through the code would.
"""
import json
import sys
import types
from pathlib import Path

import numpy as np
from mpi4py import MPI

import ringlab as rl

comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
arrays, transport, utilities = sys.argv[1], sys.argv[2], set(sys.argv[3].split(","))
PACKAGE = str(Path(rl.__file__).resolve().parent)
SIMPLE = (str, bytes, int, float, bool, complex, type(None), type, types.ModuleType, types.FunctionType,
          types.BuiltinFunctionType, types.MethodType, types.CodeType)
if arrays == "cupy":
    import cupy as xp

    rl.bind_device(comm)
else:
    xp = np


def span(value):
    """(first, last) address of an array's memory, or None for anything that is no array."""
    try:
        face = getattr(value, "__cuda_array_interface__", None) or getattr(value, "__array_interface__", None)
    except Exception:
        return None
    if not isinstance(face, dict) or "data" not in face:
        return None
    start = face["data"][0] or 0
    return start, start + int(getattr(value, "nbytes", 0))


def spans(value, depth: int = 3, seen=None) -> list:
    """The memory of every array ``value`` is or holds within ``depth`` hops."""
    if isinstance(value, SIMPLE):
        return []
    found = span(value)
    if found is not None:
        return [found] if found[1] > found[0] else []
    if depth == 0:
        return []
    seen = set() if seen is None else seen
    if id(value) in seen:
        return []
    seen.add(id(value))
    if isinstance(value, (list, tuple)):
        items = value[:64]
    elif isinstance(value, dict):
        items = list(value.values())[:64]
    else:
        items = list(getattr(value, "__dict__", {}).values())
        for cls in type(value).__mro__:
            for slot in getattr(cls, "__slots__", ()):
                items.append(getattr(value, slot, None))
    out = []
    for item in items:
        out += spans(item, depth - 1, seen)
    return out


def walk(call):
    """Run ``call()`` under a profiler; return (result, events): per Python call and return, the module of a
    ringlab frame (None for any other) and the array memory its locals held at the call."""
    events, stack = [], []

    def profile(frame, event, arg):
        if event == "call":
            name = frame.f_code.co_filename
            if name.startswith(PACKAGE):
                module = frame.f_globals.get("__name__", "?")
                held = [s for value in list(frame.f_locals.values()) for s in spans(value)]
                stack.append(len(events))
                events.append(("call", module, frame.f_code.co_name, held))
            else:
                stack.append(None)
                events.append(("call", None, frame.f_code.co_name, []))
        elif event == "return" and stack:
            stack.pop()
            events.append(("return", None, None, []))

    sys.setprofile(profile)
    try:
        result = call()
    finally:
        sys.setprofile(None)
    return result, events


def stays(events, targets, apart: set) -> tuple[list, list]:
    """The stays of the data (module, function), and the modules its frames entered, utilities included."""
    def holds(held) -> bool:
        return any(a < t1 and t0 < b for a, b in held for t0, t1 in targets)

    stack, out, entered = [], [], []
    for kind, module, function, held in events:
        if kind == "call":
            mine = module is not None and holds(held)
            stack.append((module, function, mine))
            if mine and module not in entered:
                entered.append(module)
        elif stack:
            stack.pop()
        where = next(((m, f) for m, f, mine in reversed(stack) if mine and m.rsplit(".", 1)[-1] not in apart), None)
        if where is not None and (not out or out[-1][0] != where[0]):
            out.append(where)
    return out, entered


def memory(array) -> tuple[int, int]:
    return span(array)


CASES = {  # name: (what the call is, a function of the input that makes the call)
    "first call": lambda x: rl.allreduce(x, transport=transport),
    "the same call again": lambda x: rl.allreduce(x, transport=transport),
    "out=": lambda x: rl.allreduce(x, transport=transport, out=OUT),
    "in place": lambda x: rl.allreduce(x, transport=transport, in_place=True),
    "op=avg": lambda x: rl.allreduce(x, transport=transport, op="avg"),
    "trace=True": lambda x: rl.allreduce(x, transport=transport, trace=True)[0],
    "naive": lambda x: rl.allreduce(x, "naive", transport=transport),
}
if arrays == "numpy":
    def emulated(x):
        with rl.emulate(rl.topology.uniform(n, bandwidth=1e9, latency=1e-5)):
            return rl.allreduce(x)
    CASES["emulated"] = emulated

COUNT = 4099
OUT = xp.empty(COUNT, dtype=np.float32)
for case, call in CASES.items():
    x = xp.asarray(np.arange(COUNT, dtype=np.float32) + rank)
    result, events = walk(lambda: call(x))
    targets = [memory(x), memory(result)]
    assert np.allclose(xp.asnumpy(result) if arrays == "cupy" else result,
                       (np.arange(COUNT, dtype=np.float32) * n + n * (n - 1) / 2) / (n if case == "op=avg" else 1))
    path, entered = stays(events, targets, utilities)
    every, _ = stays(events, targets, set())
    if rank == 0:
        print(json.dumps({"case": case, "stays": path, "all_stays": every, "entered": entered}), flush=True)
    comm.Barrier()
