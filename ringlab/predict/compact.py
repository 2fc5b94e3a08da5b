"""The cost model on a schedule's terms: the same prediction as the step-by-step walk, without its transfers.

A registered schedule's steps are terms (``ringlab.algorithms.pattern``): rank src sends rank dst a chunk,
or a run of chunks, sliding by a fixed stride over a run of steps. Chunks come in two sizes (the first
``count % nchunks`` one element longer), so a term carries a constant number of bytes over at most three
runs of steps (its long chunks, the one step that straddles them, its short chunks). Everything the model
asks of a step is then a sum or a maximum of such runs (``ringlab.predict.segments``):

- a message is a pair of ranks at a step: its bytes are the sum of its terms' (pairs keyed once, routed
  once on the topology, whose latency they pay);
- a step's latency is the largest sum of message latencies any rank sends, or receives;
- every channel a pair's route crosses carries the pair's bytes; a channel that only one pair crosses
  is as busy as that pair's bytes over its rate, so only its slowest such channel is kept, and channels
  several pairs cross add their pairs' bytes up (a half-duplex link's two directions counted as one);
- a rank adds what arrives for reduce at the topology's reduce rate.

Each is a handful of sorts over the runs, never the n x steps transfers, and it gives the walk's numbers:
the same latencies, busiest channel (ties to the lowest channel, as the walk's argmax), and bytes, which
``tests/test_compact.py`` holds to 1e-9 relative for every registered algorithm.
"""
from __future__ import annotations

import numpy as np

from ..algorithms.pattern import PatternSteps
from ..topology import Topology
from .protocols import Protocol, hardware_class
from .segments import dense_fits, dense_peak, largest, largest_with_key, total


def pieces(terms: dict, count: int, nchunks: int, itemsize: int):
    """Every term as at most three runs of constant bytes: (term, start, end, bytes), runs of 0 bytes left out."""
    quotient, extra = divmod(count, nchunks)  # chunks 0..extra-1 hold quotient+1 elements, the rest quotient
    t0, t1, c0, stride, width = (terms[k] for k in ("t0", "t1", "c0", "stride", "width"))
    span = t1 - t0
    backwards = stride < 0
    step = np.abs(stride)
    low = np.where(backwards, c0 + stride * (span - 1), c0)  # the first chunk, counting from the lowest
    moving = step > 0
    safe = np.where(moving, step, 1)
    full = np.where(moving, np.clip((extra - width - low) // safe + 1, 0, span),  # all chunks long
                    np.where(low + width <= extra, span, 0))
    short = np.where(moving, np.clip(-((low - extra) // safe), 0, span),  # from here on all short
                     np.where(low >= extra, 0, span))
    short = np.maximum(short, full)
    straddling = low + step * full  # the chunk of the one step in between, if any
    between = itemsize * (width * quotient + np.clip(extra - straddling, 0, width))
    runs = ((0, full, itemsize * width * (quotient + 1)), (full, short, between), (short, span, itemsize * width * quotient))
    out = []
    for first, last, nbytes in runs:  # offsets counted from the lowest chunk; a backwards term runs the other way
        start = np.where(backwards, t0 + span - last, t0 + first)
        end = np.where(backwards, t0 + span - first, t0 + last)
        keep = (last > first) & (np.broadcast_to(nbytes, span.shape) > 0)
        out.append((np.flatnonzero(keep), start[keep], end[keep], np.broadcast_to(nbytes, span.shape)[keep]))
    return tuple(np.concatenate(column) for column in zip(*out))


def predict_steps(steps: PatternSteps, nbytes: int, itemsize: int, topology: Topology, place: np.ndarray,
                  protocol: Protocol | None, done=lambda: None) -> dict[str, np.ndarray]:
    """Per step of ``steps``: latency, transfer, reduce, time, bottleneck, messages, nbytes, as the walk gives
    them (``done()`` is called after each of its five stages, for a progress bar)."""
    terms, nsteps = steps.terms, steps.nsteps
    term, start, end, size = pieces(terms, nbytes // itemsize, steps.nchunks, itemsize)
    done()
    pairs, term_pair = np.unique(place[terms["src"]] * topology.nranks + place[terms["dst"]], return_inverse=True)
    pair, dst = term_pair[term], place[terms["dst"][term]]
    pair_src, pair_dst = pairs // topology.nranks, pairs % topology.nranks
    out = {"nbytes": _per_step(nsteps, start, end, size)}
    m_pair, m_start, m_end, m_bytes = total(pair, start, end, size)  # messages: a pair's bytes at each step
    out["messages"] = _per_step(nsteps, m_start, m_end, np.ones_like(m_start))
    done()
    hop_pair, channel = topology.routes(pair_src, pair_dst)
    if protocol is None:
        latency_of = np.bincount(hop_pair, weights=topology.channel_latency[channel], minlength=len(pairs))
    else:
        hardware = np.zeros(len(pairs), dtype=np.int64)
        np.maximum.at(hardware, hop_pair, channel_hardware(topology)[channel])
        latency_of = np.array([protocol.latency(h) for h in range(3)])[hardware]
    out["latency"] = np.maximum(*(_peak(nsteps, ends, m_pair, m_start, m_end, latency_of[m_pair])
                                  for ends in (pair_src, pair_dst)))
    done()
    out["reduce"] = np.zeros(nsteps)
    adding = terms["reduce"][term]
    if adding.any() and np.isfinite(topology.reduce_rate):
        out["reduce"] = _peak(nsteps, dst[adding], np.arange(adding.sum()), start[adding], end[adding],
                              size[adding].astype(np.float64)) / topology.reduce_rate
    done()
    rate = topology.channel_rate * (protocol.rate_share if protocol else 1.0)
    out["transfer"], out["bottleneck"] = _busiest(topology, rate, hop_pair, channel, len(pairs), nsteps,
                                                  (m_pair, m_start, m_end, m_bytes))
    done()
    quiet = out["messages"] == 0  # no bytes move: the walk leaves the step at zero
    for name in ("latency", "transfer", "reduce"):
        out[name] = np.where(quiet, 0.0, out[name])
    out["bottleneck"] = np.where(quiet, -1, out["bottleneck"])
    out["time"] = out["latency"] + out["transfer"] + out["reduce"]
    return out if steps.kept is None else {name: column[steps.kept] for name, column in out.items()}


def _busiest(topology: Topology, rate, hop_pair, channel, npairs: int, nsteps: int, messages):
    """Per step, the busiest channel's seconds and the channel (the lowest among equals)."""
    m_pair, m_start, m_end, m_bytes = messages
    half = np.zeros(len(rate) // 2, dtype=bool)
    half[topology.half_duplex] = True
    key = np.where(half[channel // 2], channel & ~1, channel)  # a half-duplex link: both ways on one channel
    shared = np.bincount(key, minlength=len(rate))[key] > 1
    alone = np.flatnonzero(~shared)  # channels one pair has to itself: only its slowest (then lowest) counts
    alone = alone[np.lexsort((key[alone], rate[key[alone]], hop_pair[alone]))]
    alone = alone[np.r_[True, hop_pair[alone][1:] != hop_pair[alone][:-1]]] if len(alone) else alone
    own_key = np.full(npairs, -1, dtype=np.int64)
    own_key[hop_pair[alone]] = key[alone]
    has_own = own_key[m_pair] >= 0
    crossing = np.flatnonzero(shared)  # every segment of the pair, on each channel it shares
    first = np.searchsorted(m_pair, np.arange(npairs + 1))
    count = np.diff(first)[hop_pair[crossing]]
    which = np.repeat(first[hop_pair[crossing]], count) + np.arange(count.sum()) - np.repeat(
        np.cumsum(count) - count, count)
    keys = np.concatenate([own_key[m_pair[has_own]], np.repeat(key[crossing], count)])
    starts, ends = np.concatenate([m_start[has_own], m_start[which]]), np.concatenate([m_end[has_own], m_end[which]])
    if dense_fits(nsteps, keys, starts, ends):
        return dense_peak(nsteps, keys, starts, ends, np.concatenate([m_bytes[has_own], m_bytes[which]]), rate)
    c_key, c_start, c_end, c_bytes = total(keys[has_own.sum():], m_start[which], m_end[which], m_bytes[which])
    return largest_with_key(nsteps, np.concatenate([m_start[has_own], c_start]),
                            np.concatenate([m_end[has_own], c_end]),
                            np.concatenate([m_bytes[has_own] / rate[own_key[m_pair[has_own]]], c_bytes / rate[c_key]]),
                            np.concatenate([own_key[m_pair[has_own]], c_key]))


def _peak(nsteps: int, rank_of, which, start, end, value) -> np.ndarray:
    """For every step, the largest sum any rank has of the segments ``which`` names it in (``rank_of[which]``)."""
    rank = rank_of[which]
    if dense_fits(nsteps, rank, start, end):
        return dense_peak(nsteps, rank, start, end, value)[0]
    if np.bincount(rank_of).max(initial=0) <= 1:  # one segment a rank at a time: nothing to add up
        return largest(nsteps, start, end, value)
    return largest(nsteps, *total(rank, start, end, value)[1:])


def _per_step(nsteps: int, start, end, value) -> np.ndarray:
    """For every step, the sum of ``value`` over the runs covering it (integers: exact)."""
    change = np.zeros(nsteps + 1, dtype=np.int64)
    np.add.at(change, start, value)
    np.add.at(change, end, -value)
    return np.cumsum(change[:nsteps])


def channel_hardware(topology: Topology) -> np.ndarray:
    """Every directed channel's hardware class (NVLink, PCIe, network), as NCCL's protocols cost them."""
    kinds = getattr(topology.links, "kind", None)
    if kinds is None:
        kinds = [link.kind for link in topology.links]
    table = {kind: hardware_class(kind) for kind in set(kinds)}
    return np.repeat(np.array([table[kind] for kind in kinds], dtype=np.int64), 2)
