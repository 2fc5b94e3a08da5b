"""Training under mpiexec: ringlab's DistributedOptimizer and the synchronous parameter server end
with torch DDP's weights; the asynchronous one records staleness; the task is learned."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the train extra)")

from ringlab.cluster.launch import run_mpi  # noqa: E402

HERE = Path(__file__).parent / "mpi"
ROOT = HERE.parent.parent


def relative(a, b) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """DistributedOptimizer and DDP, 50 steps on 3 ranks (an odd count)."""
    out = tmp_path_factory.mktemp("train") / "ddp3.npz"
    done = run_mpi(3, [str(HERE / "train_equivalence.py"), str(out)], timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return np.load(out)


def test_distributed_optimizer_matches_ddp(reference):
    assert not np.allclose(reference["ringlab"], reference["initial"])  # it did train
    assert relative(reference["ringlab"], reference["ddp"]) < 1e-5


@pytest.mark.parametrize("nranks, algorithm", [(2, "ring"), (2, "naive"), (4, "rhd")])
def test_distributed_optimizer_matches_ddp_with_any_algorithm(tmp_path, nranks, algorithm):
    out = tmp_path / "w.npz"
    done = run_mpi(nranks, [str(HERE / "train_equivalence.py"), str(out), algorithm], timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = np.load(out)
    assert relative(result["ringlab"], result["ddp"]) < 1e-5


@pytest.mark.parametrize("servers", [1, 2])
def test_synchronous_parameter_server_matches_ddp(tmp_path, reference, servers):
    out = tmp_path / "ps.npz"
    done = run_mpi(3 + servers, [str(HERE / "train_ps.py"), str(out), str(servers), "sync"], timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert relative(np.load(out)["weights"], reference["ddp"]) < 1e-5
    records = json.loads(Path(str(out) + ".json").read_text())
    pushes = [s for r in records if r["role"] == "server" for s in r["staleness"]]
    assert len(pushes) == servers * 3 * 50 and all(stale == 0 for _, stale in pushes)


def test_asynchronous_parameter_server_records_staleness_and_learns(tmp_path):
    out = tmp_path / "async.npz"
    done = run_mpi(4, [str(HERE / "train_ps.py"), str(out), "1", "async", "5"], timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    records = json.loads(Path(str(out) + ".json").read_text())
    pushes = [s for r in records if r["role"] == "server" for s in r["staleness"]]
    assert len(pushes) == 3 * 50 and all(stale >= 0 for _, stale in pushes)
    assert max(stale for _, stale in pushes) > 0  # somebody computed on parameters others had moved
    straggler = [stale for w, stale in pushes if w == 2]
    others = [stale for w, stale in pushes if w != 2]
    assert np.mean(straggler) > np.mean(others)  # the slow worker's pushes are the stale ones
    workers = [r for r in records if r["role"] == "worker"]
    assert workers[2]["compute_seconds"] > 2 * workers[0]["compute_seconds"]
    assert all(np.mean(w["losses"][-10:]) < np.mean(w["losses"][:10]) for w in workers)


def test_bad_parameter_server_arguments():
    done = run_mpi(2, ["-c", "import torch\nfrom ringlab.train import ParameterServer\n"
                             "from ringlab.train.task import make_model\n"
                             "try:\n    ParameterServer(make_model(), servers=2)\nexcept ValueError as e:\n    print(e)\n"],
                   timeout=120)
    assert "servers must be in 1..1 so that at least one rank works, got 2" in done.stdout


def test_the_task_is_learned_and_scaling_is_measured():
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "train_scaling.py"), "--ranks", "1,2",
                           "--steps", "600"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split() for line in done.stdout.splitlines() if not line.startswith("#")]
    assert [int(r[0]) for r in rows] == [1, 2]
    assert all(float(r[-1]) >= 0.90 for r in rows)  # the stated accuracy, on held-out points
    assert all(float(r[1]) > 0 and r[3].endswith("%") for r in rows)


def test_with_a_straggler_synchronous_workers_wait(tmp_path):
    out = tmp_path / "sync-straggler.npz"
    done = run_mpi(4, [str(HERE / "train_ps.py"), str(out), "1", "sync", "5"], timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    workers = [r for r in json.loads(Path(str(out) + ".json").read_text()) if r["role"] == "worker"]
    # workers 0 and 1 spend their time waiting for worker 2, which is computing
    assert workers[0]["wait_seconds"] > workers[2]["wait_seconds"]
    assert workers[0]["wait_seconds"] > workers[0]["compute_seconds"]


def ps_counts(tmp_path, nranks: int, servers: int, mode: str, steps: int) -> dict:
    out = tmp_path / f"{mode}{servers}.json"
    done = run_mpi(nranks, [str(HERE / "ps_traffic.py"), str(out), str(servers), mode, str(steps)], timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("servers", [1, 2])
def test_a_synchronous_server_counts_one_push_in_and_one_reply_out_per_worker_and_step(tmp_path, servers):
    seen = ps_counts(tmp_path, 4, servers, "sync", 5)
    records, bounds, workers = seen["records"], seen["bounds"], 4 - servers
    for s in range(servers):
        shard = 4 * (bounds[s + 1] - bounds[s])  # float32 bytes of this server's shard
        assert records[s]["received_bytes"] == records[s]["sent_bytes"] == 5 * workers * shard
        assert len(records[s]["busy_seconds"]) == 5 and all(b > 0 for b in records[s]["busy_seconds"])
        history = records[s]["history"]
        assert len(history) == 5 + 1 and history[0][0] == 0  # the start, then every step
        assert [t for t, _ in history] == sorted(t for t, _ in history)
        assert history[-1][1] == records[s]["final"]  # the last copy is the final shard
    for worker in records[servers:]:
        assert worker["sent_bytes"] == worker["received_bytes"] == 5 * 4 * seen["elements"]


def test_an_asynchronous_server_counts_headers_and_one_update_per_push(tmp_path):
    seen = ps_counts(tmp_path, 3, 1, "async", 4)
    server, workers, K = seen["records"][0], seen["records"][1:], 4 * seen["elements"]
    header = 16  # two int64: the version the push was computed on, and whether the worker is done
    for worker in workers:
        assert worker["sent_bytes"] == 4 * (header + K) + header  # its pushes, then "done"
        assert worker["received_bytes"] == 4 * (header + K)  # a reply per push
    assert server["received_bytes"] == sum(w["sent_bytes"] for w in workers)
    assert server["sent_bytes"] == sum(w["received_bytes"] for w in workers)
    assert len(server["busy_seconds"]) == len(server["staleness"]) == 2 * 4
    assert len(server["history"]) == 2 * 4 + 1 and server["history"][-1][1] == server["final"]
    assert workers[1]["compute_seconds"] > 4 * 0.002  # the straggler slept 2 ms more a step at least


def test_a_straggler_outside_the_workers_is_refused():
    done = run_mpi(2, ["-c", "import torch\nfrom ringlab.train import ParameterServer\n"
                             "from ringlab.train.task import make_model\n"
                             "try:\n    ParameterServer(make_model(), straggler=(1, 3.0))\nexcept ValueError as e:\n"
                             "    print(e)\n"], timeout=120)
    assert "the straggler is worker 1, but there are 1 workers (0..0): 2 ranks, 1 serving" in done.stdout
