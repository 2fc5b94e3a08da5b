"""Lab 00, your machine: PCIe's arithmetic checked (exercise), and the lab's quiz (this machine's cores, the
DGX-1's NVLinks, the published H100 peer copies)."""
from __future__ import annotations

import numpy as np

from ..lab.exercises import compare, exercise
from ..lab.quiz import Question, Quiz
from ..lab.words import and_join
from ..topology import pcie_bandwidth
from ..topology.presets import ENCODING, NVLINK2

GiB, MiB, KiB = 1 << 30, 1 << 20, 1 << 10


# --- the exercise ---------------------------------------------------------------------------------------

def _pcie_gbytes(gt_per_s, encoding, lanes):
    return gt_per_s * encoding * lanes / 8


@exercise(_pcie_gbytes, "formula")
def check_pcie(pcie_gbytes):
    """Compare ``pcie_gbytes(gt_per_s, encoding, lanes)`` (GB/s per direction) with the PCIe arithmetic."""
    def spec(gt_per_s, encoding, lanes):
        generation = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5}[gt_per_s]
        return pcie_bandwidth(generation, lanes) / 1e9

    cases = [dict(gt_per_s=2.5, encoding=8 / 10, lanes=16), dict(gt_per_s=5.0, encoding=8 / 10, lanes=8),
             dict(gt_per_s=8.0, encoding=128 / 130, lanes=16), dict(gt_per_s=16.0, encoding=128 / 130, lanes=4)]
    compare(pcie_gbytes, "pcie_gbytes", cases, spec,
             "GT/s is billions of bit transfers per second per lane; multiply by the encoding's share of useful "
             "bits and by the lanes, then divide by 8 bits per byte.", rel_tol=1e-3, unit="GB/s")
    print("Correct: PCIe 3.0 x16 carries 15.754 GB/s each way.")


# --- the quiz -------------------------------------------------------------------------------------------

def _pcie_gbytes_of(generation, lanes):
    return pcie_bandwidth(generation, lanes) / 1e9


def _cores():
    from ..mpi.devices import cores

    return cores()


def _cores_verdict():
    n = _cores()
    from ..measure.doctor import LAB_RANKS

    return {"verdict": f"The labs' measurements run up to {LAB_RANKS} ranks, so here they share {n} "
                       f"core{'s' * (n > 1)}: a waiting rank yields its core, but every timing includes the operating "
                       "system's scheduler." if n < LAB_RANKS else
                       f"A lab's {LAB_RANKS} ranks each get a core of their own (of {n})."}


def _gpu_links(preset, gpu):
    """{peer: NVLinks between ``gpu`` and peer} on a DGX-1 preset (NVLink 2.0 links of NVLINK2 each)."""
    from ..topology import preset as load_preset

    out = {}
    for link in load_preset(preset).links:
        if link.kind == "nvlink" and f"gpu{gpu}" in (link.a, link.b):
            peer = int((link.b if link.a == f"gpu{gpu}" else link.a)[3:])
            out[peer] = round(link.bandwidth / NVLINK2)
    return out


def _nvlinks_between(preset, a, b):
    return _gpu_links(preset, a).get(b, 0)


def _dgx1_links(preset, a, b):
    links = _gpu_links(preset, a)
    return {"singles": and_join(sorted(p for p, k in links.items() if k == 1)),
            "doubles": and_join(sorted(p for p, k in links.items() if k == 2)),
            "unlinked": and_join([p for p in range(8) if p != a and p not in links]), "per_link": NVLINK2 / 1e9,
            "total": sum(links.values()),
            "mark": f"the line between them is wider and marked x{links[b]}" if links.get(b, 0) > 1 else
                    "a plain line joins them" if b in links else "no line joins them"}


def _h100_peer(name):
    from ..measure import published
    from ..topology import preset

    peer = published.peer_matrix(name, "unidirectional_enabled")
    peak = preset("hgx-h100-8").peer_bandwidth_matrix()
    off = ~np.eye(len(peer), dtype=bool)
    return peer[off], peak[off], published.load(name).label


def _h100_fraction(name):
    peer, peak, _ = _h100_peer(name)
    return float(np.median(peer / peak))


def _h100_numbers(name):
    peer, peak, label = _h100_peer(name)
    return {"median": float(np.median(peer)) / 1e9, "peak": float(peak[0]) / 1e9, "label": label}


QUIZ = Quiz("00", [
    Question(
        "A GPU sits in a x16 slot that is wired as x{lanes}, on PCIe {generation}.0. How many GB/s can it copy "
        "each way?",
        _pcie_gbytes_of, given=dict(generation=4, lanes=8), unit="GB/s",
        derived=lambda generation, lanes: {"rate": ENCODING[generation][0], "useful": ENCODING[generation][1],
                                           "x16": _pcie_gbytes_of(generation, 16)},
        worked="{rate:g} GT/s per lane x {useful:.4f} useful bits per bit sent x {lanes} lanes / 8 bits per byte "
               "= {answer:.3f} GB/s each way, half the {x16:.3f} GB/s of all 16 lanes (ringlab's "
               "`pcie_bandwidth({generation}, {lanes})`). NVML reports the width a link trained at "
               "(`facts[\"gpus\"]` from `rl.topology.discover()`): x8 where you expected x16 is worth a look.",
        hint="transfer rate (GT/s per lane) x encoding efficiency x lanes / 8 bits per byte; PCIe 4.0 runs "
             "16 GT/s per lane with 128b/130b encoding."),
    Question(
        "How many cores may this notebook's process run on? Read it from the line \"ranks and cores\" that "
        "`doctor` printed at the top of the lab.",
        _cores, unit="cores", rel_tol=0, derived=_cores_verdict,
        worked="`doctor` counted {answer}: the cores this process may run on (its CPU affinity), read on this "
               "machine when the check ran. {verdict}",
        hint="the first cell printed doctor's report; the line that starts with \"ranks and cores:\" gives the "
             "count."),
    Question(
        "In the picture of the DGX-1 (V100), how many NVLinks join GPU {a} and GPU {b}?",
        _nvlinks_between, given=dict(preset="dgx1-v100", a=0, b=3), unit="links", rel_tol=0, derived=_dgx1_links,
        worked="{answer}: {mark} (ringlab's `{preset}` preset, from published figures). GPU {a} has {total} "
               "NVLinks in all: two each to GPUs {doubles}, one each to GPUs "
               "{singles}, and none to GPUs {unlinked}, whose copies go through PCIe switches and the CPUs. At "
               "{per_link:g} GB/s each way per NVLink 2.0 link, the pair {a}-{b} has {answer} x {per_link:g} GB/s.",
        hint="look for the lines marked x2 in the DGX-1 figure; a plain line is one link."),
    Question(
        "In the heatmap of the eight H100s (published, P2P on), what fraction of the NVLink peak does the median "
        "GPU pair reach? Answer with a fraction between 0 and 1.",
        _h100_fraction, given=dict(name="B03_kr_h100x8_hgx_p2p"), rel_tol=0.05, derived=_h100_numbers,
        worked="The median pair copied {median:.0f} GB/s against a peak of {peak:.0f} GB/s (the NVLink peak of "
               "the `hgx-h100-8` preset): {answer:.2f}, as the cell under the heatmap prints ({label}).",
        hint="hover over the heatmap, or read the line printed under it: it gives the median pair as a percentage "
             "of the NVLink peak (write 50% as 0.5)."),
])
