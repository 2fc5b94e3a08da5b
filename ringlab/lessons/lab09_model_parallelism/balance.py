"""Lab 09's causal load balance in ring attention: the work each rank does with contiguous blocks and with zigzag
chunks, counted (``causal_work``) and computed by the simulated ring; the block size at which a step's compute hides
its transfer, from published peaks; the exercise on the zigzag chunks."""
from __future__ import annotations

import numpy as np

from ...lab.exercises import NotDoneYet, exercise
from ...lab.findings import Finding
from ...lab.words import and_join

RANKS = (4, 8)
CHUNK, DIM = 4, 4  # tokens a chunk of the 2n grid, head width: small, the work is what is counted
BALANCED = 1.05  # the busiest rank within 5% of the mean: balanced


def causal_rows(ranks=RANKS, measured: dict | None = None) -> list[dict]:
    """For each n and layout: ``causal_work``'s unmasked blocks of the 2n grid per rank, and the blocks the
    simulated ring computed (its scores over a chunk's square), with its largest difference from full attention.
    ``measured``: ``measure_ring_attention``'s result, whose ``RingAttention.work`` on the MPI ranks joins the rows
    of its n as blocks too."""
    from ...train.attention import attention, causal_work, simulate_ring_attention

    rows = []
    for n in ranks:
        rng = np.random.default_rng(n)
        q, k, v = (rng.standard_normal((1, 2 * n * CHUNK, DIM)) for _ in range(3))
        full = attention(q, k, v, causal=True)
        for layout in ("contiguous", "zigzag"):
            out, work = simulate_ring_attention(q, k, v, n, causal=True, layout=layout)
            rows.append({"ranks": n, "layout": layout, "counted": causal_work(n, layout),
                         "computed": [w / CHUNK**2 for w in work],
                         "difference": float(np.abs(out - full).max() / np.abs(full).max())})
            if measured and measured.get("work") and measured["ranks"] == n:
                chunk = measured["sequence"] // (2 * n)
                rows[-1]["measured"] = [w / chunk**2 for w in measured["work"][layout]["scores"]]
                rows[-1]["measured_difference"] = measured["work"][layout]["difference"]
    return rows


def balance_lesson(rows: list[dict]) -> Finding:
    """For each n: the busiest and the idlest rank of each layout, and how long a step takes against a balanced one
    (the busiest rank sets it); whether the simulated ring computed what was counted."""
    said, conclusions = [], []
    for n in sorted({r["ranks"] for r in rows}):
        parts = []
        for r in (r for r in rows if r["ranks"] == n):
            counted = r["counted"]
            busiest, mean = max(counted), sum(counted) / len(counted)
            who = (f"every rank has {busiest} unmasked blocks" if busiest == min(counted) else
                   f"rank {counted.index(busiest)} has {busiest} unmasked blocks and rank "
                   f"{counted.index(min(counted))} {min(counted)}")
            parts.append(f"{r['layout']}, {who}, so a step takes {busiest / mean:.2f}x the balanced time")
            verdict = ("balances the causal work" if busiest <= BALANCED * mean else
                       f"leaves rank {counted.index(busiest)} the busiest")
            conclusions.append(f"{r['layout']} at n = {n} {verdict}")
        said.append(f"At n = {n} ({2 * n} chunks): " + "; ".join(parts) + ".")
    same = all(abs(r["difference"]) < 1e-9 for r in rows)
    exact = [r for r in rows if r["computed"] == [float(c) for c in r["counted"]]]
    extra = [r for r in rows if r not in exact]
    said.append("Both layouts give exactly full attention" if same else "A layout differs from full attention")
    if extra:
        said[-1] += (f"; the simulated ring computed the counted blocks exactly for {and_join(sorted({r['layout'] for r in exact}))}"
                     if exact else "") + (
            f", and for {and_join(sorted({r['layout'] for r in extra}))} {extra[0]['computed'][0]:.0f} blocks on rank 0 "
            f"against {extra[0]['counted'][0]} counted: a contiguous block on the diagonal is computed whole, its masked "
            "half too." if extra[0]["layout"] == "contiguous" else ", and more than counted elsewhere.")
    else:
        said[-1] += "; the simulated ring computed exactly the counted blocks."
    timed = [r for r in rows if "measured" in r]
    if timed:
        n = timed[0]["ranks"]
        agree = all(r["measured"] == r["computed"] for r in timed)
        exact = all(r["measured_difference"] < 1e-9 for r in timed)
        said.append(f"Measured on the {n} MPI ranks (RingAttention.work, in the same blocks): "
                    + "; ".join(f"{r['layout']} {[round(w, 2) for w in r['measured']]}" for r in timed)
                    + (", what the simulation computed" if agree else ", not what the simulation computed")
                    + (", and equal to full attention in both layouts." if exact else
                       ", and a layout differs from full attention."))
    return Finding(" ".join(said), tuple(conclusions))


def hiding_rows() -> list[dict]:
    """``hiding_examples()`` as rows: a link, its rate, the H100's dense bf16 peak, and the tokens a block needs for
    its compute to hide its transfer (no mask, and causal zigzag blocks)."""
    from ...train.attention import hiding_examples

    return [{"link": link, "bandwidth": e["bandwidth"], "flops": e["flops_per_second"], "tokens": e["tokens"],
             "tokens_causal_zigzag": e["tokens_causal_zigzag"], "label": e["label"]}
            for link, e in hiding_examples().items()]


def grouped_hiding_block(heads: int, kv_heads: int, link: str = "NVLink", computed: float = 1.0) -> float:
    """``hiding_block`` at ``hiding_examples``' rates on ``link`` for grouped-query attention: ``kv_heads`` heads of K
    and V travel while ``heads`` query heads compute against them, so each query head's compute has kv_heads / heads
    of a head's K and V bytes to hide."""
    from ...train.attention import hiding_block, hiding_examples

    rates = hiding_examples()[link]
    return hiding_block(rates["flops_per_second"], rates["bandwidth"], bytes_per_element=2 * kv_heads / heads,
                        computed=computed)


HIDING_COLUMNS = {"link": "link", "GB/s (each way)": ("gb_s", ".0f"), "TFLOP/s (bf16 dense)": ("tflops", ".0f"),
                  "block that hides it (tokens)": ("tokens", ",.0f"),
                  "causal zigzag block (tokens)": ("tokens_causal_zigzag", ",.0f")}


def hiding_table(rows: list[dict]) -> list[dict]:
    return [{**r, "gb_s": r["bandwidth"] / 1e9, "tflops": r["flops"] / 1e12} for r in rows]


def _on(link: str) -> str:
    return f"on a {link}" if link.endswith("NIC") else f"on {link}"


def hiding_lesson(rows: list[dict], sequence: int = 131072, ranks: int = 8) -> Finding:
    """Whether a ``sequence`` over ``ranks`` gives blocks large enough to hide the transfer on each link (published
    peaks: a condition, not a measurement)."""
    block = sequence // ranks
    said = [f"Published peaks, not measurements: at the H100's {rows[0]['flops'] / 1e12:.0f} TFLOP/s a block must hold "
            + "; ".join(f"{r['tokens']:,.0f} tokens {_on(r['link'])} ({r['bandwidth'] / 1e9:.0f} GB/s), "
                        f"{r['tokens_causal_zigzag']:,.0f} with causal zigzag blocks (half their scores masked)"
                        for r in rows)
            + f" for its compute to hide its transfer. A sequence of {sequence:,} tokens over {ranks} ranks gives "
              f"blocks of {block:,} tokens:"]
    conclusions = []
    for r in rows:
        hides = block >= r["tokens_causal_zigzag"]
        said.append(f"{_on(r['link'])} causal blocks {'hide' if hides else 'do not hide'} the transfer "
                    f"({block / r['tokens_causal_zigzag']:.1f}x the size needed)" + (";" if r is not rows[-1] else "."))
        conclusions.append(f"causal blocks of {block} tokens {'hide' if hides else 'do not hide'} the transfer "
                           + _on(r["link"]))
    said.append("Real kernels reach less of the FLOP rate and transfers less of the link: the ratio of the two rates "
                "reached decides.")
    return Finding(" ".join(said), tuple(conclusions))


def _zigzag(nranks):
    from ...train.attention import layout_chunks
    return layout_chunks(nranks, "zigzag")


@exercise(_zigzag, "zigzag_chunks")
def check_zigzag_chunks(zigzag_chunks):
    """Compare the learner's ``zigzag_chunks(nranks)`` with ringlab's zigzag layout, then count each rank's work."""
    from ...train.attention import causal_work

    for n in (1, 2, 3, 4, 8):
        got = zigzag_chunks(n)
        if got is None:
            raise NotDoneYet("zigzag_chunks returned None")
        want = _zigzag(n)
        if [tuple(pair) for pair in got] != [tuple(pair) for pair in want]:
            work = [sum(c + 1 for c in pair) for pair in got] if all(len(p) == 2 for p in got) else got
            raise AssertionError(f"zigzag_chunks({n}) returned {got}; expected {want} (with yours each rank's causal "
                                 f"work would be {work}).\nHint: cut the sequence into 2n chunks; rank r takes one "
                                 "from the front and its mirror from the back: chunk r and chunk 2n-1-r.")
    print(f"Correct: every rank has one early and one late chunk, and the same work: {causal_work(8, 'zigzag')} "
          "unmasked blocks at n = 8.")
