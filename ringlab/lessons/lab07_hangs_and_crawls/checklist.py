"""What to check when a GPU job crawls (lab 07): NCCL's settings, peer access, and which link each rank uses.

- :func:`nccl_settings`, :func:`html_table`: NCCL's settings that matter, with their sources;
- :func:`p2p_rows` and :func:`describe_p2p`: the published P2P off/on sweeps of one RTX 4090 box;
- :func:`rank_links`: which GPU each rank gets under ``CUDA_VISIBLE_DEVICES``, and which link each pair
  of ring neighbours crosses, from an ``nvidia-smi topo -m`` matrix.
"""
from __future__ import annotations

import html
import re
from ...lab.words import and_join


# --- 3. NCCL's settings, and P2P off against on ---------------------------------------------------------------

NCCL_ENV = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html"
NCCL_TROUBLE = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html"


def nccl_settings() -> list[dict]:
    """NCCL's settings that matter when a job hangs or crawls: setting, what it changes, when to use it, source."""
    return [
        {"setting": "NCCL_DEBUG=INFO", "changes": "prints NCCL's version, the transport of every ring and tree "
         "edge (P2P/IPC, SHM, NET/IB, NET/Socket), the number of channels, and warnings", "when": "first, on every "
         "rank: it says what NCCL chose, and the last lines before a hang say where it stopped", "source": NCCL_ENV},
        {"setting": "NCCL_P2P_DISABLE=1", "changes": "no direct GPU-to-GPU copies (NVLink or PCIe peer access): "
         "data goes through host memory (SHM) instead", "when": "to test whether a hang comes from broken peer "
         "access (IOMMU/ACS on, some consumer GPUs and drivers); if it helps, fix the platform, since it costs "
         "bandwidth", "source": NCCL_ENV},
        {"setting": "NCCL_SHM_DISABLE=1", "changes": "no shared-memory transport between processes: NCCL uses "
         "the network (IB or sockets) where P2P cannot be used", "when": "a container's /dev/shm too small, or "
         "shared memory failing; better: give the container more", "source": NCCL_ENV},
        {"setting": "NCCL_IB_DISABLE=1", "changes": "no InfiniBand/RoCE verbs: TCP sockets between nodes",
         "when": "to rule out a misconfigured IB fabric; expect much lower bandwidth between nodes",
         "source": NCCL_ENV},
        {"setting": "NCCL_SOCKET_IFNAME=eth0", "changes": "which IP interfaces NCCL uses for bootstrap and socket "
         "traffic (prefixes; ^ excludes, = exact)", "when": "hangs at start-up on hosts with docker0, virbr or "
         "several NICs where the chosen one cannot reach the other nodes", "source": NCCL_ENV},
        {"setting": "NCCL_ALGO, NCCL_PROTO", "changes": "forces ring/tree (and others) and the LL/LL128/Simple "
         "protocols instead of NCCL's tuned choice", "when": "only to test a suspicion (a slow tree, a protocol "
         "bug); NCCL marks them for debugging, not production", "source": NCCL_ENV},
        {"setting": "docker --shm-size=1g (or --ipc=host)", "changes": "room in /dev/shm, where NCCL keeps its "
         "SHM buffers; docker's default is 64 MB", "when": "'unhandled system error' or 'Error while creating "
         "shared memory segment' inside a container", "source": NCCL_TROUBLE},
        {"setting": "ulimit -l unlimited (docker --ulimit memlock=-1)", "changes": "how much memory a process may "
         "pin (page-lock), which InfiniBand registration needs", "when": "IB errors registering memory inside "
         "containers or under a batch system's limits", "source": NCCL_TROUBLE},
    ]


def html_table(rows: list[dict], columns: dict) -> object:
    """``rows`` as an HTML table (``columns``: header -> key), escaped, for a notebook; no pandas needed."""
    from IPython.display import HTML

    if not rows:
        raise ValueError("no rows to show")
    missing = [key for key in columns.values() if key not in rows[0]]
    if missing:
        raise ValueError(f"the rows have no {', '.join(map(repr, missing))}; they have {', '.join(rows[0])}")
    head = "".join(f"<th style='text-align:left'>{html.escape(h)}</th>" for h in columns)
    body = "".join("<tr>" + "".join(f"<td style='text-align:left'>{_cell(row[k])}</td>" for k in columns.values())
                   + "</tr>" for row in rows)
    return HTML(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")


def _cell(value) -> str:
    text = html.escape(str(value))
    return f"<a href='{text}'>{text.split('/')[-1] or text}</a>" if text.startswith("https://") else text


P2P_SWEEPS = {"P2P off": "A10_chlc_rtx4090x8_pcie_p2poff_allreduce", "P2P on": "A11_chlc_rtx4090x8_pcie_p2pon_allreduce"}


def p2p_rows(sweeps: dict = P2P_SWEEPS) -> list[dict]:
    """The published nccl-tests allreduce sweeps of one 8x RTX 4090 box with peer access off and on, as rows
    for ``ringlab.viz.busbw_plot`` (out-of-place busbw; sizes with none printed left out)."""
    from ...measure import published

    rows = []
    for state, name in sweeps.items():
        entry = published.load(name)
        for r in entry.data["rows"]:
            busbw = r["busbw_Bps"] if r["busbw_Bps"] is not None else r["inplace_busbw_Bps"]
            if r["bytes"] and busbw:
                rows.append({"bytes": r["bytes"], "busbw_Bps": busbw, "algorithm": f"published: {state} ({name[:3]})"})
    return rows


def describe_p2p(rows: list[dict]) -> str:
    """The two published sweeps compared at the largest size both printed, worded from the rows."""
    lines = sorted({r["algorithm"] for r in rows})
    off = [a for a in lines if "P2P off" in a]
    on = [a for a in lines if "P2P on" in a]
    if len(off) != 1 or len(on) != 1:
        raise ValueError(f"need one 'P2P off' and one 'P2P on' sweep, got: {', '.join(lines) or 'none'}")
    by = {a: {r["bytes"]: r["busbw_Bps"] for r in rows if r["algorithm"] == a} for a in (off[0], on[0])}
    common = sorted(set(by[off[0]]) & set(by[on[0]]))
    if not common:
        raise ValueError("the two sweeps share no size")
    size = common[-1]
    b_off, b_on = by[off[0]][size], by[on[0]][size]
    ratio = b_on / b_off
    verdict = (f"peer access on reached {ratio:.2f}x the busbw of off" if ratio >= 1.05 else
               f"peer access off reached {1 / ratio:.2f}x the busbw of on: here P2P did not help" if ratio < 1 / 1.05
               else
               "about the same busbw either way")
    return (f"At {size / 2**20:g} MiB, the largest size of both published sweeps: {b_on / 1e9:.2f} GB/s with P2P on, "
            f"{b_off / 1e9:.2f} GB/s with P2P off, {verdict}.")


# --- 4. CUDA_VISIBLE_DEVICES, local ranks, and the link between ring neighbours ---------------------------

CODE_MEANING = {
    "PIX": "PCIe through at most one switch", "PXB": "PCIe through several switches, not the host bridge",
    "PHB": "PCIe through the host bridge, in the CPU", "NODE": "PCIe and the link between host bridges of one "
    "NUMA node", "SYS": "PCIe and the SMP interconnect between NUMA nodes, such as QPI/UPI",
}


def _meaning(code: str) -> str:
    match = re.fullmatch(r"NV(\d+)", code)
    if match:
        return f"{match.group(1)} bonded NVLinks"
    if code not in CODE_MEANING:
        raise ValueError(f"unknown topo -m code {code!r}; known: NV#, {', '.join(CODE_MEANING)}")
    return CODE_MEANING[code]


def visible_gpus(visible: str | None, count: int) -> list[int]:
    """The physical GPUs a process sees, in the order it numbers them 0, 1, ...: ``CUDA_VISIBLE_DEVICES``
    (None or unset: all ``count``)."""
    if visible is None:
        return list(range(count))
    items = [v.strip() for v in visible.split(",")]
    if not all(re.fullmatch(r"\d+", v) for v in items):
        raise ValueError(f"CUDA_VISIBLE_DEVICES={visible!r}: this reads GPU indices (like 2,3); "
                         "UUIDs (GPU-...) or MIG names need nvidia-smi -L to map")
    gpus = [int(v) for v in items]
    wrong = [g for g in gpus if g >= count]
    if wrong:
        raise ValueError(f"CUDA_VISIBLE_DEVICES={visible!r} names GPU {wrong[0]}; the topology has GPUs 0-{count - 1}")
    if len(set(gpus)) != len(gpus):
        raise ValueError(f"CUDA_VISIBLE_DEVICES={visible!r} names a GPU twice")
    return gpus


def rank_links(codes, visible: str | None, ranks_per_node: int, numa: list | None = None) -> list[dict]:
    """For the ranks of one node (local rank = rank here): the device each binds (``bind_device``: local rank
    mod visible GPUs), the physical GPU behind it, and the link to the next rank of the ring, from a GPU-by-GPU
    ``topo -m`` code matrix. One row per rank, with a sentence ``says``."""
    codes = codes.gpu_codes() if hasattr(codes, "gpu_codes") else [list(row) for row in codes]
    if not codes or any(len(row) != len(codes) for row in codes):
        raise ValueError("codes must be a square GPU-by-GPU matrix of topo -m codes")
    if isinstance(ranks_per_node, bool) or not isinstance(ranks_per_node, int) or ranks_per_node < 2:
        raise ValueError(f"a ring needs at least 2 ranks on the node, got {ranks_per_node!r}")
    gpus = visible_gpus(visible, len(codes))
    rows = []
    for rank in range(ranks_per_node):
        after = (rank + 1) % ranks_per_node
        device, next_device = rank % len(gpus), after % len(gpus)
        gpu, next_gpu = gpus[device], gpus[next_device]
        if gpu == next_gpu:
            code, link = "X", "the same GPU: NCCL refuses two ranks of one communicator on one GPU"
        else:
            code = codes[gpu][next_gpu]
            link = f"{code} ({_meaning(code)})"
            if numa is not None and numa[gpu] is not None and numa[next_gpu] is not None:
                link += f", NUMA node {numa[gpu]} -> {numa[next_gpu]}"
        sharing = [r for r in range(ranks_per_node) if gpus[r % len(gpus)] == gpu]
        shared = (f"; ranks {and_join(sharing)} {'both' if len(sharing) == 2 else 'all'} drive GPU {gpu}, and NCCL refuses two ranks of one communicator "
                  "on one GPU" if len(sharing) > 1 and code != "X" else "")
        rows.append({"rank": rank, "device": device, "gpu": gpu, "next_rank": after, "next_gpu": next_gpu,
                     "code": code, "says": f"rank {rank} -> rank {after}: device {device} -> {next_device} is "
                                           f"GPU {gpu} -> GPU {next_gpu} over {link}{shared}"})
    return rows


