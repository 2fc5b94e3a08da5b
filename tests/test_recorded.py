"""Recorded results (the files the labs show on machines without a GPU), the script that records
them, and every exercise check (a right answer passes, a wrong one fails with a hint)."""
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ringlab.lab import exercises
from ringlab.lessons.lab00_your_machine import check_pcie
from ringlab.lessons.lab01_moving_bytes import check_message_time, check_staged_time
from ringlab.lessons.lab02_reduce_broadcast import check_chain_time
from ringlab.lessons.lab03_allreduce import check_reduce_scatter_rule
from ringlab.lessons.lab04_parameter_servers.serverload import check_server_load
from ringlab.lessons.lab05_scaling.predictions import check_ring_time
from ringlab.lessons.lab06_training.batches import check_scaled_lr
from ringlab.measure import recorded
from ringlab.mpi.devices import gpu_count
from ringlab.measure.doctor import LAB_PLANS as DOCTOR_LABS
from ringlab.lab.notebooks import LABS

ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / "benchmarks" / "record_results.py"


@pytest.mark.skipif(gpu_count() > 0, reason="this machine has a GPU")
def test_the_recorder_refuses_a_machine_without_a_gpu():
    done = subprocess.run([sys.executable, str(RECORD)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "no GPU here" in done.stderr


@pytest.mark.timeout(300)
def test_the_recorder_writes_files_the_loader_reads_back(tmp_path):
    done = subprocess.run([sys.executable, str(RECORD), "--allow-cpu", "--out", str(tmp_path), "-b", "1K", "-e", "8K",
                           "-f", "8", "--iters", "2"], capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    names = sorted(p.name for p in tmp_path.glob("*.json"))
    gpu = gpu_count() > 0  # on a GPU machine the recorder records the GPU, staged runs too
    assert names == sorted(["bandwidth.json", "bench-allgather-2ranks.json", "bench-allreduce-2ranks.json",
                            "bench-reduce_scatter-2ranks.json"] + (["bench-allreduce-2ranks-staged.json"] if gpu else []))
    found = recorded.load(root=tmp_path, gpu_only=False)
    assert len(found) == len(names)
    assert {r.kind for r in found} == {"ringlab-bandwidth", "ringlab-bench"}
    for r in found:
        assert r.machine["command"].startswith("ringlab ")
        assert r.date[:10] in r.label and r.machine["host"] in r.label and ("no GPU" in r.label) != gpu
        if r.kind == "ringlab-bench":
            assert r.data["ranks"] == 2 and all(row["wrong"] == 0 for row in r.data["rows"])
            algorithms = {row["algorithm"] for row in r.data["rows"]}
            assert {f"{r.data['collective']}.ring", "mpi"} <= algorithms and algorithms <= {
                f"{r.data['collective']}.ring", "mpi", "nccl", "torch"}
    assert len(recorded.load(root=tmp_path)) == (len(names) if gpu else 0)  # CPU runs are not GPU results
    assert recorded.load("ringlab-bench", root=tmp_path, gpu_only=False)[0].kind == "ringlab-bench"


def _gpu_result(tmp_path) -> Path:
    """A file in the shape ``ringlab bandwidth --json`` writes on a GPU machine. The numbers are made up
    for this test of the display; nothing like it is ever committed under results/."""
    gpu = {"gpus": 2, "host_device": [
        {"what": w, "pinned": p, "Bps": rate, "peak_Bps": peak}
        for p, scale in ((True, 1.0), (False, 0.5))
        for w, rate, peak in (("host->device", 20e9 * scale, 25e9), ("device->host", 15e9 * scale, 25e9),
                              ("both ways at once", 30e9 * scale, 50e9))],
        "device_copy_Bps": 1e12, "small_h2d_latency_s": 4e-6,
        "p2p": {"peer_access_on": [[0, 40e9], [40e9, 0]], "peer_access_off": [[0, 10e9], [10e9, 0]]}}
    machine = {"date": "2030-01-02T03:04:05+00:00", "command": "ringlab bandwidth -n 2 --json b.json",
               "host": "testhost", "gpus": [{"name": "Test GPU"}, {"name": "Test GPU"}], "driver": "999.1"}
    path = tmp_path / "bandwidth.json"
    path.write_text(json.dumps({"kind": "ringlab-bandwidth", "schema": 1, "cpu": {}, "gpu": gpu, "machine": machine}))
    return path


def test_without_a_gpu_the_newest_recording_is_shown_with_its_label(tmp_path, capsys):
    _gpu_result(tmp_path)
    shown = recorded.gpu_bandwidth(root=tmp_path, measure=False)
    text = capsys.readouterr().out
    label = "recorded on testhost (2 x Test GPU, driver 999.1) on 2030-01-02 with `ringlab bandwidth -n 2 --json b.json`"
    assert shown["source"] == label and label in text
    row = re.search(r"host->device\s+pinned\s+(\S+)\s+(\S+)\s+(\S+)", text)
    assert row.groups() == ("20.00", "25.00", "0.80")
    assert "peer access off" in text and "8-byte host->device latency: 4.00 us" in text
    from ringlab.viz import bandwidth_heatmap, host_device_figure
    figure = host_device_figure(shown, shown["source"])
    assert [t.name for t in figure.data] == ["pinned", "pageable", "link peak (from generation and width)"]
    assert list(figure.data[1].y) == [10.0, 7.5, 15.0]
    assert bandwidth_heatmap(shown["p2p"]["peer_access_on"]).data


def test_without_a_gpu_or_a_recording_nothing_is_shown(tmp_path, capsys):
    assert recorded.gpu_bandwidth(root=tmp_path, measure=False) is None
    assert "no recorded GPU results" in capsys.readouterr().out


def test_a_broken_results_file_is_named(tmp_path):
    (tmp_path / "x.json").write_text("{not json")
    with pytest.raises(ValueError, match="x.json: not a readable ringlab result"):
        recorded.load(root=tmp_path)
    (tmp_path / "x.json").write_text('{"kind": "something else"}')
    with pytest.raises(ValueError, match="x.json: not a ringlab result"):
        recorded.load(root=tmp_path)
    with pytest.raises(ValueError, match="kind must be one of"):
        recorded.load("bench")


def test_committed_results_are_gpu_results_with_their_metadata():
    for r in recorded.load(gpu_only=False):
        assert r.on_gpu, f"{r.path}: results/ is for GPU measurements; the labs measure CPUs themselves"
        for key in ("date", "command", "gpus", "driver", "mpi", "versions"):
            assert r.machine.get(key), f"{r.path}: machine description lacks {key!r}"


def test_doctor_lists_the_labs_that_exist():
    notebooks = sorted(p.stem for p in LABS.glob("[0-9][0-9]_*.ipynb"))
    assert [title[:2] for title, _, _ in DOCTOR_LABS] == [name[:2] for name in notebooks]
    assert len(notebooks) == 12


CHECKS = [
    (check_reduce_scatter_rule, lambda j, i, n: (j - i) % n, lambda j, i, n: (j + i) % n),
    (check_chain_time, lambda K, n, S, B: K * (S + n - 2) / (S * B), lambda K, n, S, B: (n - 1) * K / B),
    (check_ring_time, lambda n, K, a, B: 2 * (n - 1) * (a + K / (n * B)), lambda n, K, a, B: 2 * K / B),
    (check_server_load, lambda n, M, K: (n - 1) * K // M + (M - 1) * K // M, lambda n, M, K: (n - 1) * K),
    (check_scaled_lr, lambda b, k, s, w: b * (1 + (k - 1) * min(s, w) / w), lambda b, k, s, w: b * k),
    (check_pcie, lambda r, e, lanes: r * e * lanes / 8, lambda r, e, lanes: r * lanes / 8),
    (check_message_time, lambda K, a, B: a + K / B, lambda K, a, B: K / B),
    (check_staged_time, lambda K, a, link, c: a + K / link + 2 * K / c, lambda K, a, link, c: a + K / link),
]


@pytest.mark.parametrize("check, right, wrong", CHECKS, ids=[c[0].__name__ for c in CHECKS])
def test_every_exercise_check_passes_the_right_answer_and_explains_a_wrong_one(check, right, wrong, capsys, monkeypatch):
    monkeypatch.delenv(exercises.STRICT_ENV, raising=False)
    assert check(right) is right  # the rest of the lab uses yours
    assert capsys.readouterr().out.startswith("Correct")
    with pytest.raises(AssertionError, match="Hint:"):
        check(wrong, strict=True)
    with pytest.raises(AssertionError):
        check(lambda *args: np.nan, strict=True)
    monkeypatch.setenv(exercises.STRICT_ENV, "1")
    with pytest.raises(AssertionError, match="Hint:"):
        check(wrong)
    monkeypatch.delenv(exercises.STRICT_ENV)
    # a learner's Run All: the verdict is printed, never raised, and the reference takes over
    reference = check(wrong)
    said = capsys.readouterr().out
    assert " is not right yet: " in said and "Hint:" in said and "use the reference" in said
    assert reference is not wrong and check(reference, strict=True) is reference
    assert check(lambda *args: None) is reference
    assert "not done yet" in capsys.readouterr().out
    with pytest.raises(exercises.NotDoneYet):
        check(lambda *args: None, strict=True)
    assert check(lambda *args: 1 / 0) is reference
    assert "raised ZeroDivisionError: division by zero" in capsys.readouterr().out


def test_without_a_gpu_a_recorded_gpu_sweep_is_found_by_collective(tmp_path, capsys):
    bench = {"kind": "ringlab-bench", "schema": 1, "collective": "allreduce", "ranks": 2, "gpu": True,
             "rows": [{"bytes": 1 << 20, "algorithm": "nccl", "busbw_Bps": 1e9, "time_s": 1e-3, "wrong": 0}],
             "machine": {"date": "2030-01-02T00:00:00+00:00", "command": "ringlab bench --gpu", "host": "h",
                         "gpus": [{"name": "Test GPU"}]}}  # made-up numbers: a test of the lookup only
    assert recorded.gpu_bench("allreduce", root=tmp_path, measure=False) is None
    assert "no recorded GPU allreduce results" in capsys.readouterr().out
    (tmp_path / "a.json").write_text(json.dumps(bench))
    (tmp_path / "b.json").write_text(json.dumps({**bench, "collective": "allgather"}))
    found = recorded.gpu_bench("allreduce", root=tmp_path, measure=False)
    assert found.path.name == "a.json" and found.label in capsys.readouterr().out
    assert recorded.gpu_bench("reduce", root=tmp_path, measure=False) is None


def test_a_sweep_that_stands_for_a_gpu_machine_is_direct_and_mps_is_compared_only_in_pairs(tmp_path):
    def bench(name, ranks, transport, mps, scale):
        data = {"kind": "ringlab-bench", "collective": "allreduce", "ranks": ranks, "gpu": True, "transport": transport,
                "machine": {"date": f"2026-01-0{ranks}", "host": "h", "command": "ringlab bench", "mps": mps,
                            "gpus": [{"name": "G"}], "driver": "1"},
                "rows": [{"bytes": b, "algorithm": "allreduce.ring", "time_s": scale * t, "busbw_Bps": b / (scale * t)}
                         for b, t in ((8, 1e-3), (1 << 20, 2e-3))]}
        (tmp_path / name).write_text(json.dumps(data))

    bench("a.json", 3, "host", True, 1.0)       # staged: never the one shown
    bench("b.json", 2, "auto", False, 1.0)
    assert recorded.sharing_comparison(root=tmp_path) is None  # no pair yet
    bench("c.json", 2, "auto", True, 0.25)
    shown = recorded.gpu_bench("allreduce", root=tmp_path, measure=False)
    assert shown.path.name == "c.json" and "MPS on; 2 ranks sharing it" in shown.label
    pair = recorded.sharing_comparison(root=tmp_path)
    assert pair["ranks"] == 2 and pair["with_mps"].path.name == "c.json" and pair["without_mps"].path.name == "b.json"
    out = io.StringIO()
    rows = recorded.print_sharing(pair, out)
    assert [r["speedup"] for r in rows] == pytest.approx([4.0, 4.0])
    assert "2 ranks sharing 1 x G" in out.getvalue() and "4.0x" in out.getvalue()
    assert {r["algorithm"] for r in recorded.sharing_rows(pair)} == {"allreduce.ring, MPS", "allreduce.ring, time slices"}
    said = recorded.describe_sharing([{"bytes": 8, "speedup": 5.0}, {"bytes": 1 << 20, "speedup": 2.0}])
    assert said.startswith("MPS made the ring 2.0x to 5.0x faster (most at 8 B); at 1 MiB it was 2.0x, the least")
    said = recorded.describe_sharing([{"bytes": 8, "speedup": 1.5}, {"bytes": 1 << 20, "speedup": 2.0}])
    assert "so even there waiting for turns cost more" in said
    with pytest.raises(ValueError, match="no sizes"):
        recorded.describe_sharing([])


def test_the_committed_h100_recordings_compare_sharing_with_and_without_mps():
    pair = recorded.sharing_comparison()
    if pair is None:
        pytest.skip("no recorded pair of sweeps with and without MPS under results/")
    assert pair["with_mps"].machine["mps"] and not pair["without_mps"].machine.get("mps")
    rows = recorded.print_sharing(pair, io.StringIO())
    assert rows and all(r["speedup"] > 0 for r in rows)


def test_a_gpu_sweep_says_where_its_bytes_were_and_why_nccl_is_missing():
    from ringlab.measure.recorded import describe_gpu_bench

    rows = [{"algorithm": "allreduce.ring", "memory": "device"}, {"algorithm": "mpi", "memory": "host"}]
    shared = {"ranks": 3, "rows": rows, "machine": {"gpus": [{"name": "H100"}], "mpi_cuda_aware": False}}
    said = describe_gpu_bench(shared)
    assert said.startswith("3 ranks on 1 GPU: allreduce.ring with its buffers in GPU memory; mpi with its buffers in "
                           "host memory.")
    assert "this MPI is not CUDA-aware" in said and "NCCL refuses two ranks of one communicator" in said
    own = {"ranks": 2, "rows": rows + [{"algorithm": "nccl", "memory": "device"}],
           "machine": {"gpus": [{"name": "H100"}] * 2, "mpi_cuda_aware": False}}
    assert "NCCL has no row" not in describe_gpu_bench(own)
