"""Lab 01, moving bytes: one message's alpha-beta time and a message staged through host memory (exercises),
and the lab's quiz. What the lab measures (copies against MPI) is ``ringlab.measure.copies``."""
from __future__ import annotations

from ..algorithms import build
from ..lab.exercises import compare, exercise
from ..lab.quiz import Question, Quiz
from ..predict.costmodel import predict
from ..topology import uniform
from ..topology.presets import PCIE3_X16

GiB, MiB, KiB = 1 << 30, 1 << 20, 1 << 10


# --- the exercises --------------------------------------------------------------------------------------

def _message_time(nbytes, alpha, bandwidth):
    return alpha + nbytes / bandwidth


def _staged_time(nbytes, alpha, link, copy):
    return alpha + nbytes / link + 2 * nbytes / copy


@exercise(_message_time, "formula")
def check_message_time(message_time):
    """``message_time(nbytes, alpha, bandwidth)``: the alpha-beta model of one message, in seconds."""
    def model(nbytes, alpha, bandwidth):
        return alpha + nbytes / bandwidth

    cases = [dict(nbytes=k, alpha=a, bandwidth=b) for k, a, b in
             [(0, 2e-6, 10e9), (8, 2e-6, 10e9), (1 << 20, 2e-6, 10e9), (64 << 20, 1e-6, 25e9)]]
    compare(message_time, "message_time", cases, model,
             "a fixed start-up cost alpha, plus the bytes divided by the bandwidth (bytes per second).")
    print("Correct: t = alpha + K / B.")


@exercise(_staged_time, "formula")
def check_staged_time(staged_time):
    """``staged_time(nbytes, alpha, link, copy)``: a message copied into a staging buffer, sent, and
    copied out again, one after the other (no pipelining)."""
    def model(nbytes, alpha, link, copy):
        return alpha + nbytes / link + 2 * nbytes / copy

    cases = [dict(nbytes=k, alpha=a, link=b, copy=c) for k, a, b, c in
             [(0, 2e-6, 10e9, 5e9), (1 << 20, 2e-6, 10e9, 5e9), (64 << 20, 1e-6, 15.754e9, 20e9)]]
    compare(staged_time, "staged_time", cases, model,
             "the message itself costs alpha + K / link; staging adds one copy of K bytes at the copy rate before "
             "the send and another after the receive.")
    print("Correct: staging adds 2K / copy rate to every message.")


# --- the quiz -------------------------------------------------------------------------------------------

def _one_message(nbytes, alpha, bandwidth):
    """The cost model's time for one message between two ranks (a direct broadcast from rank 0 to rank 1)."""
    return predict(build("broadcast.direct", 2), nbytes, uniform(2, bandwidth=bandwidth, latency=alpha)).seconds


def _balance_kb(alpha, bandwidth):
    """The size (kB) whose transfer time equals its latency, read off the cost model's per-step terms."""
    step = predict(build("broadcast.direct", 2), 1, uniform(2, bandwidth=bandwidth, latency=alpha)).steps
    return float(step["latency"].sum() / step["transfer"].sum()) / 1e3


def _staged_ratio(nbytes, alpha, link, copy):
    return _staged_time(nbytes, alpha, link, copy) / _message_time(nbytes, alpha, link)


def _staged_parts(nbytes, alpha, link, copy):
    return {"direct_ms": _message_time(nbytes, alpha, link) * 1e3, "copies_ms": 2 * nbytes / copy * 1e3,
            "link_GBps": link / 1e9, "mib": nbytes / MiB}


def _p2p_ratio(name):
    from ..measure import published

    off, on = published.peer_rows(name, "", peak_on_Bps=1.0, peak_off_Bps=1.0)
    return on["Bps"] / off["Bps"]


def _p2p_numbers(name):
    from ..measure import published

    off, on = published.peer_rows(name, "", peak_on_Bps=1.0, peak_off_Bps=1.0)
    return {"on": on["Bps"] / 1e9, "off": off["Bps"] / 1e9, "label": published.load(name).label}


QUIZ = Quiz("01", [
    Question(
        "A link has latency alpha = {alpha_us:g} us and bandwidth B = {gbps:g} GB/s. How many microseconds does "
        "one message of 1 MiB take?",
        lambda alpha_us, gbps, nbytes: _one_message(nbytes, alpha_us * 1e-6, gbps * 1e9) * 1e6,
        given=dict(alpha_us=2.0, gbps=10.0, nbytes=MiB), unit="us",
        derived=lambda alpha_us, gbps, nbytes: {"transfer": nbytes / (gbps * 1e9) * 1e6},
        worked="alpha + K/B = {alpha_us:g} us + {nbytes} B / {gbps:g} GB/s = {alpha_us:g} + {transfer:.2f} = "
               "{answer:.2f} us (ringlab's cost model, one message between two ranks). At this size the latency "
               "is a small part; at 8 bytes it would be nearly all of it.",
        hint="t = alpha + K/B, with K in bytes (1 MiB = 2**20 bytes) and B in bytes per second (1 GB/s = 1e9)."),
    Question(
        "Same kind of link, alpha = {alpha_us:g} us and B = {gbps:g} GB/s ({gbits:g} Gbit/s). At what message size, in "
        "kB (1000 bytes), is half the time latency and half transfer?",
        lambda alpha_us, gbps: _balance_kb(alpha_us * 1e-6, gbps * 1e9), given=dict(alpha_us=5.0, gbps=12.5),
        unit="kB", derived=lambda alpha_us, gbps: {"gbits": gbps * 8},
        worked="Solve alpha = K/B: K = alpha x B = {alpha_us:g}e-6 s x {gbps:g}e9 B/s = {answer:g} kB (the cost "
               "model's latency and transfer terms are equal there). Messages much smaller are latency-bound: "
               "sending them faster needs fewer messages, not more bandwidth.",
        hint="the latency term alpha equals the transfer term K/B when K = alpha x B; then divide bytes by 1000."),
    Question(
        "A {mib:g} MiB message between two GPUs is staged through host memory: copied out at {copy_gbps:g} GB/s, "
        "sent over a PCIe 3.0 x16 link (alpha = {alpha_us:g} us), copied in at {copy_gbps:g} GB/s, one after the "
        "other. How many times as long does it take as the same message sent directly?",
        lambda mib, alpha_us, copy_gbps: _staged_ratio(mib * MiB, alpha_us * 1e-6, PCIE3_X16, copy_gbps * 1e9),
        given=dict(mib=16, alpha_us=2.0, copy_gbps=10.0), unit="times",
        derived=lambda mib, alpha_us, copy_gbps: _staged_parts(mib * MiB, alpha_us * 1e-6, PCIE3_X16, copy_gbps * 1e9),
        worked="Direct: alpha + K/link = {direct_ms:.3f} ms over the {link_GBps:.3f} GB/s of PCIe 3.0 x16. Staged "
               "adds two copies, 2K/copy rate = {copies_ms:.3f} ms: ({direct_ms:.3f} + {copies_ms:.3f}) / "
               "{direct_ms:.3f} = {answer:.2f}x (the formula of exercise 2). GPUDirect peer access and CUDA-aware "
               "MPI exist to remove those copies.",
        hint="staged = alpha + K/link + 2K/copy; direct = alpha + K/link; PCIe 3.0 x16 carries {link_GBps:.3f} GB/s "
             "each way (lab 00's arithmetic)."),
    Question(
        "In the printout of the published peer copies, how many times faster is a copy between two H100s of the "
        "NVSwitch box with peer access on than with it off (median over GPU pairs)?",
        _p2p_ratio, given=dict(name="B03_kr_h100x8_hgx_p2p"), unit="times", rel_tol=0.05, derived=_p2p_numbers,
        worked="{on:.1f} GB/s with P2P on against {off:.1f} GB/s with it off: {answer:.1f}x. With peer access off each "
               "copy goes through host memory over the GPUs' PCIe links; on, it crosses NVLink and NVSwitch "
               "directly ({label}).",
        hint="the printed line for \"8x H100 SXM, NVSwitch\" ends with on/off; or divide its P2P-on rate by its "
             "P2P-off rate."),
])
