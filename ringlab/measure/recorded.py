"""Results measured on a GPU machine and committed under ``results/``, for the machines that have none.

``ringlab bandwidth --json`` and ``ringlab bench --json`` write the measurements together with the
machine's description (GPUs, driver, MPI library, versions, the command, the date). A lab on a
laptop without a GPU cannot measure NVLink or pinned host memory, so it shows those files instead,
each labelled with the machine, the date and the command that produced it. Nothing here invents a
number: with no GPU and no recorded file, the labs say so.

    >>> from ringlab.measure import recorded
    >>> recorded.load("ringlab-bandwidth")      # newest first; [] when nothing is recorded
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from .units import format_bytes

RESULTS = Path(__file__).resolve().parents[2] / "results"
KINDS = ("ringlab-bandwidth", "ringlab-bench")


@dataclass(frozen=True)
class Recorded:
    """One committed JSON file: what ``ringlab bandwidth`` or ``ringlab bench`` wrote."""

    path: Path
    data: dict

    @property
    def kind(self) -> str:
        return self.data["kind"]

    @property
    def machine(self) -> dict:
        return self.data.get("machine", {})

    @property
    def date(self) -> str:
        return self.machine.get("date", "unknown date")

    @property
    def on_gpu(self) -> bool:
        """Whether the file holds GPU measurements (bandwidth with a ``gpu`` part, or a bench run with --gpu)."""
        return bool(self.data.get("gpu")) if self.kind == "ringlab-bench" else "gpu" in self.data

    @property
    def label(self) -> str:
        """Where, when and how it was measured, for the caption of every table and plot made from it."""
        if "label" in self.data:
            return self.data["label"]
        gpus = self.machine.get("gpus") or []
        names = sorted({g.get("name", "?") for g in gpus})
        where = (f"{len(gpus)} x {', '.join(names)}" if gpus else "no GPU") + \
            (f", driver {self.machine['driver']}" if self.machine.get("driver") else "") + \
            (", MPS on" if self.machine.get("mps") else "")
        ranks = self.data.get("ranks") if self.kind == "ringlab-bench" else None
        if ranks and gpus and ranks > len(gpus):
            where += f"; {ranks} ranks sharing {'it' if len(gpus) == 1 else 'them'}"
        return (f"recorded on {self.machine.get('host', 'an unnamed host')} ({where}) on {self.date[:10]} "
                f"with `{self.machine.get('command', '?')}`")


def _read(path: Path) -> Recorded:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ValueError(f"{path}: not a readable ringlab result ({err})") from None
    if not isinstance(data, dict) or data.get("kind") not in KINDS or "machine" not in data:
        raise ValueError(f"{path}: not a ringlab result (needs 'kind' in {KINDS} and 'machine')")
    return Recorded(path, data)


def load(kind: str | None = None, gpu_only: bool = True, root: Path | str | None = None) -> list[Recorded]:
    """The recorded results under ``root`` (default: the project's ``results/``), newest first.

    ``kind`` is ``"ringlab-bandwidth"`` or ``"ringlab-bench"`` (None: both). ``gpu_only`` leaves out
    CPU-only files. A JSON file that is not a ringlab result raises ValueError naming it.
    """
    if kind is not None and kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    root = RESULTS if root is None else Path(root)
    found = [_read(p) for p in sorted(root.glob("**/*.json"))] if root.exists() else []
    found = [r for r in found if (kind is None or r.kind == kind) and (r.on_gpu or not gpu_only)]
    return sorted(found, key=lambda r: r.date, reverse=True)


def _gbs(value) -> str:
    return f"{value / 1e9:8.2f}" if value else f"{'-':>8}"


def peer_matrices(gpu: dict) -> dict:
    """The peer-copy rates (B/s, sender by receiver) of the GPU part of a ``ringlab bandwidth`` result, by how they
    were measured: ``{"peer access on": matrix, "peer access off": matrix}``, or {} with one GPU. The result's
    ``p2p`` also says which pairs could have peer access, a matrix of booleans, which is no rate."""
    p2p = gpu.get("p2p", {})
    return {key.replace("_", " "): p2p[key] for key in ("peer_access_on", "peer_access_off") if key in p2p}


def print_gpu_bandwidth(gpu: dict, out=None) -> None:
    """The GPU part of a ``ringlab bandwidth`` result as a table: each figure, its link's peak, the ratio."""
    out = sys.stdout if out is None else out
    print(f"  {'copy':<18} {'host memory':<11} {'GB/s':>8}  {'peak':>8}  ratio", file=out)
    for row in gpu.get("host_device", []):
        ratio = f"{row['Bps'] / row['peak_Bps']:.2f}" if row.get("peak_Bps") else "-"
        print(f"  {row['what']:<18} {'pinned' if row['pinned'] else 'pageable':<11} {_gbs(row['Bps'])}  "
              f"{_gbs(row.get('peak_Bps'))}  {ratio}", file=out)
    if "device_copy_Bps" in gpu:
        print(f"  {'device->device':<18} {'':<11} {_gbs(gpu['device_copy_Bps'])}  (bytes copied per second)",
              file=out)
    if "small_h2d_latency_s" in gpu:
        print(f"  8-byte host->device latency: {gpu['small_h2d_latency_s'] * 1e6:.2f} us", file=out)
    for access, matrix in peer_matrices(gpu).items():
        print(f"  peer-to-peer copy, {access} (GB/s):", file=out)
        for a, row in enumerate(matrix):
            print(f"    gpu{a} " + " ".join(f"{'-':>8}" if a == b else _gbs(v) for b, v in enumerate(row)), file=out)


def gpu_bandwidth(out=None, root: Path | str | None = None, measure: bool | None = None) -> dict | None:
    """Host<->device, device and peer copies: measured on this GPU when there is one, otherwise the
    newest recorded GPU result (labelled with its machine and date), otherwise a line saying there is
    neither. Returns the GPU part of the result shown (with ``"source"``: "measured here" or the label),
    or None.
    """
    from ..mpi.devices import gpu_count

    out = sys.stdout if out is None else out
    if measure is None:
        measure = gpu_count() > 0
    if measure:
        from .bandwidth import gpu_report
        result = gpu_report(out)
        result["source"] = "measured here"
        return result
    found = load("ringlab-bandwidth", root=root)
    if not found:
        print("No GPU here, and no recorded GPU results in results/ yet: nothing on a GPU is shown, "
              "because nothing was measured. (On a GPU machine, `ringlab bandwidth --json FILE` records them.)",
              file=out)
        return None
    newest = found[0]
    print(f"No GPU here. Showing GPU results {newest.label}:", file=out)
    print_gpu_bandwidth(newest.data["gpu"], out)
    return {**newest.data["gpu"], "source": newest.label}


def gpu_bench(collective: str = "allreduce", out=None, root: Path | str | None = None,
              measure: bool | None = None, sizes: str = "-b 64K -e 256M -f 4") -> Recorded | None:
    """ringlab's ring against MPI (and NCCL and torch.distributed with a GPU per rank) on GPUs.

    With a GPU here, runs ``ringlab bench --gpu`` now on max(2, GPUs) ranks (ranks may share a GPU;
    NCCL is left out then, since it refuses two ranks on one GPU) and returns it labelled
    "measured here". Otherwise the newest recorded GPU bench of ``collective``, with its label, or
    None with a line saying there is none.
    """
    import subprocess
    import tempfile

    from ..mpi.devices import gpu_count

    out = sys.stdout if out is None else out
    gpus = gpu_count()
    if measure is None:
        measure = gpus > 0
    if measure:
        ranks = max(2, gpus)
        algorithms = f"{collective}.ring,mpi" + (",nccl,torch" if gpus >= ranks and collective == "allreduce" else "")
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "bench.json"
            done = subprocess.run([sys.executable, "-m", "ringlab", "bench", "-n", str(ranks), "--gpu", "-c", collective,
                                   "-a", algorithms, *sizes.split(), "--json", str(path)],
                                  capture_output=True, text=True, timeout=600)
            print(done.stdout, file=out)
            if done.returncode != 0:
                raise RuntimeError(f"ringlab bench --gpu failed:\n{done.stderr[-2000:]}")
            data = json.loads(path.read_text())
        return Recorded(Path("measured here"), {**data, "label": "measured here"})
    found = [r for r in load("ringlab-bench", root=root) if r.data.get("collective") == collective]
    if not found:
        print(f"No GPU here, and no recorded GPU {collective} results in results/ yet: no GPU figures are shown, "
              "because none were measured. (On a GPU machine, benchmarks/record_results.py records them.)", file=out)
        return None
    best = max(found, key=_representative)
    print(f"No GPU here. Showing the {collective} sweep {best.label}.", file=out)
    return best


def describe_gpu_bench(result: dict) -> str:
    """What a GPU sweep's rows are (``ringlab bench --gpu`` results): where each implementation's bytes were, and,
    where NCCL has no row, why, worded from the result's own fields."""
    rows, machine = result["rows"], result.get("machine") or {}
    names = list(dict.fromkeys(r["algorithm"] for r in rows))
    gpus = len(machine.get("gpus") or []) or None
    where = {name: "GPU" if any(r["memory"] == "device" for r in rows if r["algorithm"] == name) else "host"
             for name in names}
    said = [f"{result['ranks']} ranks" + (f" on {gpus} GPU{'s' * (gpus > 1)}" if gpus else "") + ": "
            + "; ".join(f"{name} with its buffers in {where[name]} memory" for name in names) + "."]
    if where.get("mpi") == "host":
        aware = machine.get("mpi_cuda_aware")
        said.append("The mpi row is MPI's own Allreduce on a host copy of the same data, the baseline ringlab must "
                    "beat: " + ("this MPI is not CUDA-aware, so it cannot read GPU memory." if aware is False else
                                "it is timed on host memory as ringlab's bench always times MPI under --gpu."))
    if "nccl" not in names:
        if gpus is not None and result["ranks"] > gpus:
            said.append(f"NCCL has no row: its ranks shared {gpus} GPU{'s' * (gpus > 1)}, and NCCL refuses two "
                        "ranks of one communicator on the same GPU (it needs a GPU per rank).")
        else:
            said.append("NCCL has no row: it was not asked for, or its library was not there.")
    return " ".join(said)


def _representative(r: Recorded) -> tuple:
    """The order in which recorded sweeps stand for a machine: direct (not staged through the host),
    a GPU per rank, then MPS when ranks share a GPU, then more ranks, then the newest."""
    gpus = len(r.machine.get("gpus") or []) or 1
    ranks = r.data.get("ranks", 0)
    return (r.data.get("transport") != "host", ranks <= gpus, bool(r.machine.get("mps")), ranks, r.date)


def sharing_comparison(collective: str = "allreduce", root: Path | str | None = None) -> dict | None:
    """Recorded sweeps of ``collective`` on ranks sharing one GPU, with MPS and without, on the same
    machine and rank count: ``{"ranks", "machine", "with_mps", "without_mps"}`` (each a Recorded) for the
    largest such rank count, or None when no such pair was recorded."""
    pairs: dict[tuple, dict] = {}
    for r in load("ringlab-bench", root=root):
        gpus = r.machine.get("gpus") or []
        if (r.data.get("collective") != collective or r.data.get("transport") == "host" or not gpus
                or r.data.get("ranks", 0) <= len(gpus)):
            continue
        key = (r.data["ranks"], r.machine.get("host"), tuple(g.get("name") for g in gpus))
        pairs.setdefault(key, {}).setdefault("with_mps" if r.machine.get("mps") else "without_mps", r)
    complete = [(key, pair) for key, pair in pairs.items() if len(pair) == 2]
    if not complete:
        return None
    (ranks, _, names), pair = max(complete, key=lambda item: item[0][0])
    return {"ranks": ranks, "machine": f"{len(names)} x {names[0]}", **pair}


def sharing_rows(pair: dict) -> list[dict]:
    """The rows of a :func:`sharing_comparison`, each algorithm named with and without MPS, for one plot."""
    return [{**row, "algorithm": f"{row['algorithm']}, {'MPS' if key == 'with_mps' else 'time slices'}"}
            for key in ("without_mps", "with_mps") for row in pair[key].data["rows"]]


def print_sharing(pair: dict, out=None) -> list[dict]:
    """Per size: ringlab's time with ranks taking turns on the GPU and under MPS, and how many times faster
    MPS was, computed from the two recorded sweeps. Returns the rows printed."""
    out = sys.stdout if out is None else out
    kind = pair["with_mps"].data["collective"]
    times = {key: {r["bytes"]: r["time_s"] for r in pair[key].data["rows"] if r["algorithm"] == f"{kind}.ring"}
             for key in ("with_mps", "without_mps")}
    rows = [{"bytes": b, "without_mps_s": times["without_mps"][b], "with_mps_s": times["with_mps"][b],
             "speedup": times["without_mps"][b] / times["with_mps"][b]}
            for b in sorted(set(times["with_mps"]) & set(times["without_mps"]))]
    print(f"{kind}.ring on {pair['ranks']} ranks sharing {pair['machine']} (recorded, "
          f"{pair['with_mps'].date[:10]}):", file=out)
    print(f"  {'size':>10}  {'time slices (us)':>17}  {'MPS (us)':>9}  MPS faster by", file=out)
    for row in rows:
        print(f"  {row['bytes']:>10}  {row['without_mps_s'] * 1e6:>17.1f}  {row['with_mps_s'] * 1e6:>9.1f}  "
              f"{row['speedup']:.1f}x", file=out)
    return rows


def describe_sharing(rows: list[dict]) -> str:
    """One sentence from :func:`print_sharing`'s rows: how much faster MPS made the ring, where most,
    and whether the largest size gained least (moving bytes, not waiting for turns, dominating there)."""
    if not rows:
        raise ValueError("no sizes recorded both with and without MPS")
    fastest = max(rows, key=lambda r: r["speedup"])
    least = min(r["speedup"] for r in rows)
    last = rows[-1]
    return (f"MPS made the ring {least:.1f}x to {fastest['speedup']:.1f}x faster (most at {format_bytes(fastest['bytes'])}); "
            f"at {format_bytes(last['bytes'])} it was {last['speedup']:.1f}x, "
            + ("the least of all sizes: there moving the bytes, not waiting for a turn, takes most of the time."
               if last["speedup"] == least else "so even there waiting for turns cost more than moving the bytes."))
