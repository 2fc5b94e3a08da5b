"""Lab 08's prefetch (FSDP's ``forward_prefetch`` and ``BACKWARD_PRE``): a ZeRO-3 step with and without it, on 4
ranks on an emulated machine in virtual time, its time against a timeline priced by the cost model, and the most
parameter bytes held at once, measured from the tensors."""
from __future__ import annotations

import statistics

from ...algorithms import build
from ...lab.findings import Finding
from ...predict import predict
from ...topology import from_spec

# The emulated machine of the prefetch steps, with modelled compute (compute="model": this CPU's work never counts,
# a layer's forward and backward take what rl.emulate's elapse says): 50 MB/s each way per rank and 20 us a
# message, so that one unit's allgather on 4 ranks (a 256 x 256 float64 layer, 526 KB: about 8 ms) takes about
# one layer's modelled forward (FORWARD) and, with the unit's reduce-scatter, about its backward (BACKWARD, twice
# the forward, as a matrix product's backward is two of them). Prefetch then has about as much to hide as compute
# can hide, and the step's time is the links' and the model's alone, however busy this machine is.
MACHINE = "uniform:0.05:20"
WIDTH, LAYERS = 256, 4  # four square float64 layers: four units of equal size
FORWARD, BACKWARD = 8e-3, 16e-3  # seconds of modelled compute a layer
BATCH = 8
CLEAR = 0.1  # a step shorter by 10% or more is clearly shorter
MATCH = 0.1  # a measured step within 10% of its prediction matches it


def make_model(seed: int = 0):
    """:data:`LAYERS` square linear layers of :data:`WIDTH`, float64, ReLU between: one unit each."""
    import torch

    torch.manual_seed(seed)
    layers = []
    for _ in range(LAYERS):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1]).double()


def model_compute(model, forward: float = FORWARD, backward: float = BACKWARD) -> None:
    """Each linear layer's forward elapses ``forward`` seconds on the virtual clock, and its backward ``backward``
    before its gradients. Call after wrapping the model in ZeroOptimizer, so that a unit is gathered before its
    modelled backward (hooks run in the order they were registered)."""
    import torch

    from ...mpi import emulate

    def timed(module, inputs, output):
        emulate.elapse(forward)
        output.register_hook(lambda grad: emulate.elapse(backward))

    for layer in model.modules():
        if isinstance(layer, torch.nn.Linear):
            layer.register_forward_hook(timed)


def prefetch_timeline(forward: list[float], backward: list[float], gathers: list[float], scatters: list[float],
                  prefetch: bool) -> float:
    """Seconds of a ZeRO-3 step whose unit i computes ``forward[i]`` then ``backward[i]`` seconds and whose
    allgathers and reduce-scatters take ``gathers[i]`` and ``scatters[i]``. Without prefetch each collective runs
    where it is needed, on the critical path; with it they run one after another on a stream of their own beside
    compute, unit i+1's allgather handed over as unit i's forward begins (i-1's as its backward begins), each
    reduce-scatter as its unit's gradients are ready, and the step ends when the last one has."""
    if not prefetch:
        return sum(forward) + sum(backward) + 2 * sum(gathers) + sum(scatters)
    units = len(forward)
    t = stream = 0.0
    ends = {}

    def hand(key, seconds):
        nonlocal stream
        if key not in ends:
            stream = max(stream, t) + seconds  # the stream takes it when both it and the handing thread are there
            ends[key] = stream

    for i in range(units):
        hand(("forward", i), gathers[i])
        t = max(t, ends[("forward", i)])
        if i + 1 < units:
            hand(("forward", i + 1), gathers[i + 1])
        t += forward[i]
    for i in reversed(range(units)):
        hand(("backward", i), gathers[i])
        t = max(t, ends[("backward", i)])
        if i > 0:
            hand(("backward", i - 1), gathers[i - 1])
        t += backward[i]
        hand(("scatter", i), scatters[i])
    return max(t, stream)


def measure_prefetch(comm=None, steps: int = 3, machine: str = MACHINE) -> dict:
    """A ZeRO-3 step (SGD) without and with prefetch on ``machine``'s emulated links, modelled compute, timed in
    virtual time; the most parameter bytes each rank held at once (``ZeroOptimizer.peak_parameters``), its pieces'
    bytes and one unit's, and the step predicted by :func:`prefetch_timeline` with the cost model's collectives. On
    every rank: {"rows": [...], "machine", "ranks", "unit_bytes", "forward", "backward"}."""
    import torch
    from mpi4py import MPI

    from ...mpi.emulate import emulate, now, synchronize
    from ...train import ZeroOptimizer
    from ...train.task import one_thread
    from .sharding import unit_bytes

    comm = MPI.COMM_WORLD if comm is None else comm
    n, rank = comm.Get_size(), comm.Get_rank()
    topology, scale = from_spec(machine, n)
    sizes = unit_bytes(make_model())
    gathers = [predict(build("allgather.ring", n), size, topology, itemsize=8).seconds for size in sizes]
    scatters = [predict(build("reduce_scatter.ring", n), size, topology, itemsize=8).seconds for size in sizes]
    x = torch.randn(BATCH, WIDTH, generator=torch.Generator().manual_seed(rank), dtype=torch.float64)
    rows = []
    with one_thread():
        for prefetch in (False, True):
            model = make_model()
            opt = ZeroOptimizer(torch.optim.SGD(model.parameters(), lr=1e-3), model, stage=3, comm=comm,
                                prefetch=prefetch)
            model_compute(model)
            seconds, peaks = [], []
            with emulate(machine, compute="model"):
                for _ in range(steps + 1):  # the first is a warm-up
                    opt.zero_grad()
                    synchronize(comm)
                    start = now()
                    model(x).pow(2).mean().backward()
                    opt.step()
                    synchronize(comm)
                    seconds.append(now() - start)
                    peaks.append(opt.peak_parameters)
            pieces = sum(p.numel() * p.element_size() for p in opt.pieces)
            opt.close()
            predicted = prefetch_timeline([FORWARD] * len(sizes), [BACKWARD] * len(sizes), gathers, scatters, prefetch)
            rows.append({"prefetch": prefetch, "measured_s": statistics.median(seconds[1:]) / scale,
                         "predicted_s": predicted, "peak": max(peaks[1:]), "pieces": pieces})
    everyone = comm.allgather(rows)
    out = [{**row, "measured_s": max(r[i]["measured_s"] for r in everyone),
            "peak": [r[i]["peak"] for r in everyone], "pieces": [r[i]["pieces"] for r in everyone],
            "compute_s": len(sizes) * (FORWARD + BACKWARD), "gathers_s": 2 * sum(gathers), "scatters_s": sum(scatters)}
           for i, row in enumerate(rows)]
    return {"rows": out, "machine": machine, "ranks": n, "unit_bytes": max(sizes), "forward": FORWARD,
            "backward": BACKWARD}


def prefetch_rows(result: dict) -> list[dict]:
    """Rank 0's figures, a row without and one with prefetch: the step measured and predicted, its compute and
    collectives (predicted), and the parameter bytes held at the peak, in all and beyond the rank's own pieces
    (the full units gathered), in units."""
    unit = result["unit_bytes"]
    return [{"prefetch": row["prefetch"], "measured_s": row["measured_s"], "predicted_s": row["predicted_s"],
             "compute_s": row["compute_s"], "collectives_s": row["gathers_s"] + row["scatters_s"],
             "peak": row["peak"][0], "gathered": row["peak"][0] - row["pieces"][0],
             "units": (row["peak"][0] - row["pieces"][0]) / unit} for row in result["rows"]]


def prefetch_lesson(result: dict) -> Finding:
    """Whether prefetch hid the gathers, whether the steps matched the timeline, and how many more units' parameters
    it held at the peak, each chosen by the numbers."""
    off, on = prefetch_rows(result)
    ms = lambda s: f"{s * 1e3:.1f} ms"  # noqa: E731
    unit = result["unit_bytes"]
    shorter = 1 - on["measured_s"] / off["measured_s"]
    said = [f"On the emulated {result['machine']} ({result['ranks']} ranks, compute modelled: "
            f"{ms(result['forward'])} forward and {ms(result['backward'])} backward a layer), a ZeRO-3 step took "
            f"{ms(off['measured_s'])} without prefetch and {ms(on['measured_s'])} with it, in virtual time; the "
            f"timeline predicts {ms(off['predicted_s'])} and {ms(on['predicted_s'])} from {ms(off['compute_s'])} of "
            f"compute and {ms(off['collectives_s'])} of collectives (the cost model's)."]
    conclusions = []
    if shorter >= CLEAR:
        exposed = on["measured_s"] - on["compute_s"]
        said.append(f"Prefetch hid the gathers: the step was {shorter:.0%} shorter, and {ms(exposed)} of its "
                    f"{ms(on['collectives_s'])} of collectives were left beyond compute, against "
                    f"{ms(off['measured_s'] - off['compute_s'])} without it.")
        conclusions.append("prefetch hid the gathers on the emulated machine")
    else:
        change = (f"{shorter:.0%} shorter" if shorter > 0 else f"{-shorter:.0%} longer" if shorter < 0 else
                  "no shorter")
        said.append(f"Prefetch did not clearly hide the gathers: the step was {change} with it.")
        conclusions.append("prefetch did not clearly hide the gathers on the emulated machine")
    apart = [abs(row["measured_s"] / row["predicted_s"] - 1) for row in (off, on)]
    if max(apart) <= MATCH:
        said.append(f"Both steps are within {max(apart):.1%} of the timeline.")
        conclusions.append("the measured steps match the predictions on the emulated machine")
    else:
        said.append(f"The steps are {apart[0]:.0%} and {apart[1]:.0%} off the timeline: something the timeline "
                    "leaves out took time.")
        conclusions.append("the measured steps do not match the predictions on the emulated machine")
    more = (on["peak"] - off["peak"]) / unit
    held = (f"At the peak rank 0 held {on['peak'] / 1024:.0f} KiB of parameters with prefetch against "
            f"{off['peak'] / 1024:.0f} KiB without: its own pieces and {on['units']:.2f} against {off['units']:.2f} "
            f"full units ({unit / 1024:.0f} KiB each)")
    if abs(more - 1) <= 0.05:
        said.append(held + ", one more unit's parameters: the price of having the next one on its way.")
        conclusions.append("prefetch held one more unit's parameters at the peak")
    elif more > 0.05:
        said.append(held + f", {more:.2f} units' more.")
        conclusions.append("prefetch held more than one more unit's parameters at the peak")
    else:
        said.append(held + ": no more at the peak.")
        conclusions.append("prefetch held no more parameters at the peak")
    return Finding(" ".join(said), tuple(conclusions))


def prefetch_against_data_parallel(comm=None, steps: int = 3) -> list[dict]:
    """ZeRO-3 with and without prefetch train the small float64 model of :func:`.sharding.small_model`
    ``steps`` steps (SGD with momentum, Adam): per optimizer, the largest absolute difference between their weights
    (0.0: bit for bit) and the largest relative difference of prefetch's from data parallelism's, on every rank."""
    from mpi4py import MPI

    from ...train import DistributedOptimizer, ZeroOptimizer
    from .sharding import optimizers, train_small_model

    comm = MPI.COMM_WORLD if comm is None else comm
    rank = comm.Get_rank()

    def train(wrap, make):
        return train_small_model(wrap, make, rank, steps)[0]

    rows = []
    for name, make in optimizers():
        plain = train(lambda m, o: DistributedOptimizer(o, m.named_parameters(), overlap=False, comm=comm), make)
        off = train(lambda m, o: ZeroOptimizer(o, m, stage=3, comm=comm), make)
        on = train(lambda m, o: ZeroOptimizer(o, m, stage=3, comm=comm, prefetch=True), make)
        rows.append({"optimizer": name, "versus_no_prefetch": comm.allreduce(float((on - off).abs().max()), op=MPI.MAX),
                     "versus_data_parallel": comm.allreduce(float((on - plain).abs().max() / plain.abs().max()),
                                                            op=MPI.MAX)})
    return rows


PREFETCH_COLUMNS = {"prefetch": "prefetch", "measured step, virtual (ms)": "measured_s",
                    "predicted (ms)": "predicted_s",
                    "compute (ms)": "compute_s", "collectives, predicted (ms)": "collectives_s",
                    "parameters at peak (KiB)": "peak", "full units at peak": ("units", ".2f")}
