"""Real nccl-tests and rccl-tests logs, as people pasted them in issues, docs and READMEs (tests/data/real_logs,
each with its source in SOURCES.json): every one is read exactly as a person reads it, or refused with a message
naming the one thing to give; none is read wrong."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ringlab.measure.logs import LogFormatError, read_logs
from ringlab.measure.nccltests import FACTORS

HERE = Path(__file__).parent / "data" / "real_logs"
SOURCES = json.loads((HERE / "SOURCES.json").read_text())
# Where the log's own numbers say otherwise than the words around it in its source:
NUMBERS_SAY = {
    # every row's busbw / algbw is 1.9375 = 2 x 31/32: 32 ranks, not the 128 of the job's name (and its header's
    # maxBytes is not its rows'): the paste was put together from another run than the one described
    "06_a100_16x8_allreduce_k8s_sharp_coreweave.log": {"ranks": 32},
}


def listed(value, runs):
    return value if isinstance(value, list) else [value] * runs


def test_the_corpus_is_what_the_issue_asks():
    """At least 20 logs, each with its source; AMD, PCIe boxes, Grace Hopper, old layouts, pasted damage."""
    assert len(SOURCES) >= 20
    assert sorted(p.name for p in HERE.glob("*.log")) == sorted(s["file"] for s in SOURCES)
    kinds = {k for s in SOURCES for k in s["kinds"]}
    assert {"rccl", "pcie", "gh200", "no_program_line", "no_root_column", "multi_node", "several_runs",
            "indented", "fenced", "ompi_prefix", "slurm_prefix", "ray_prefix", "grep_filtered",
            "mpi_program"} <= kinds
    assert all(s["source_url"].startswith("https://") for s in SOURCES)


@pytest.mark.parametrize("source", SOURCES, ids=[s["file"][:2] for s in SOURCES])
def test_a_real_log_is_read_right_or_refused_naming_what_to_give(source):
    text = (HERE / source["file"]).read_text()
    want = dict(source, **NUMBERS_SAY.get(source["file"], {}))
    runs = len(want["rows"])
    collectives = listed(want["collective"], runs)
    try:
        got = read_logs(text)
    except LogFormatError as err:
        assert "--collective" in str(err), str(err)
        got = read_logs(text, collective=",".join(collectives))
    if source["file"].startswith("27_"):
        # sixteen one-rank runs (a build without MPI under mpirun), their rows interleaved out of order: read
        # as the runs their sizes show, every row a one-rank allreduce
        assert {r["ranks"] for r in got} == {1} and sum(len(r["rows"]) for r in got) == want["rows"][0]
        return
    assert [r["collective"] for r in got] == collectives
    assert [len(r["rows"]) for r in got] == want["rows"]
    for r, ranks in zip(got, listed(want["ranks"], runs)):
        # only the source's words say how many ranks a log without device lines ran a factor-1 collective on
        assert r["ranks"] == ranks or (r["ranks"] is None and not r["devices"] and FACTORS[r["collective"]] == "1")
    for spot in want["spot_rows"]:
        rows = got[spot.get("run", 1) - 1]["rows"]
        row = next(r for r in rows if r["bytes"] == spot["bytes"])
        assert row["busbw_Bps"] == pytest.approx(spot["busbw_GBps"] * 1e9)
        if spot["inplace_busbw_GBps"] is not None:
            assert row["inplace_busbw_Bps"] == pytest.approx(spot["inplace_busbw_GBps"] * 1e9)
    if want["avg_busbw_GBps"] is not None and runs == 1:
        assert got[-1]["avg_busbw_Bps"] == pytest.approx(want["avg_busbw_GBps"] * 1e9)


def test_ringlab_import_says_what_to_give_and_then_reads_every_run(tmp_path):
    path = HERE / "15_mi250x_4x8_allgather_allreduce_slurm_label_rccl.log"
    done = subprocess.run([sys.executable, "-m", "ringlab", "import", str(path)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and "--collective A,B" in done.stderr and "allgather or alltoall" in done.stderr
    done = subprocess.run([sys.executable, "-m", "ringlab", "import", str(path), "--collective", "allgather,allreduce",
                           "--json", str(tmp_path / "out.json")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    data = json.loads((tmp_path / "out.json").read_text())
    assert [(d["collective"], d["ranks"], d["collective_from"]) for d in data] == [
        ("allgather", 32, "given"), ("allreduce", 32, "given")]


WHAT_TO_GIVE = ("--machine", "--collective", "mpirun -np")


@pytest.mark.parametrize("source", SOURCES, ids=[s["file"][:2] for s in SOURCES])
def test_explain_gives_every_real_sweep_of_eight_rows_a_verdict_or_names_what_it_needs(source):
    """Done when (issue 50): on every real log of at least 8 rows, ``explain`` prints a verdict or names the one
    thing it needs."""
    from ringlab.measure.explain import explain

    text = (HERE / source["file"]).read_text()
    try:
        runs = read_logs(text)
    except LogFormatError as err:
        assert "--collective" in str(err)
        return
    for run in runs:
        if len(run["rows"]) < 8:
            continue
        try:
            answer = explain(run)
        except ValueError as err:
            assert any(what in str(err) for what in WHAT_TO_GIVE), str(err)
            continue
        assert answer["verdict"] in ("healthy", "below its hardware")
        assert answer["rows"] and all(r["measured_busbw"] > 0 for r in answer["rows"])


def test_an_rccl_log_without_gpu_names_is_pointed_at_the_amd_presets():
    """rccl-tests printed no GPU names (13: empty device names) but its 'RCCL version' line: AMD Instinct."""
    from ringlab.measure.explain import explain

    run, = read_logs((HERE / "13_mi355x_2x8_allreduce_pollara_cut_rccl.log").read_text())
    assert run["tool"] == "rccl-tests" and run["nccl_version"].startswith("2.26.6")
    with pytest.raises(ValueError, match=r"nearest it: mi\d+x-8, mi\d+x-8.*--machine"):
        explain(run)
    assert explain(run, "mi355x:2x8")["verdict"] in ("healthy", "below its hardware")


def test_what_a_log_cannot_say_of_its_machine_is_asked_for_not_assumed():
    from ringlab.measure.explain import explain

    def run(name):
        return read_logs(next(HERE.glob(name + "_*.log")).read_text())[0]

    # two ranks on one RTX 5090 (same host, device and bus id): nothing of the links to judge
    with pytest.raises(ValueError, match="ranks 0, 1 ran on one GPU.*one rank per GPU"):
        explain(run("21"))
    # 32 ranks of A100 (busbw / algbw) behind a device list cut with '...': how many nodes is not in the log
    with pytest.raises(ValueError, match="device lines were cut.*--machine.*a100:4x8"):
        explain(run("06"))
    # GH200 on two nodes with no NCCL INFO lines: the NICs are assumed, and said; given, the sweep is healthy
    assumed = explain(run("26"))
    assert any("names no network" in note and "fabric=" in note for note in assumed["notes"])
    assert explain(run("26"), "gh200:2x4:fabric=slingshot:nic=200")["verdict"] == "healthy"
