"""The trainers' contract on real ranks (2 ranks and an odd count): each optimizer on its own communicator,
the user's messages untouched, gradients final after backward() (DDP's contract), the optimizer's param
groups the truth, options and steps agreed, against MPI's own Allreduce or torch DDP."""
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch", reason="torch is not installed (the train extra)")

from ringlab.cluster.launch import run_mpi  # noqa: E402

pytestmark = pytest.mark.quiet  # its numbers are timings: `dev.py test` runs it alone, after the rest

SCRIPT = Path(__file__).parent / "mpi" / "train_contract.py"


def run(mode: str, nranks: int, tmp_path, timeout: float = 240) -> list[dict]:
    out = tmp_path / f"{mode}.json"
    done = run_mpi(nranks, [str(SCRIPT), mode, str(out)], timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


def relative(a, b) -> float:
    a, b = np.asarray(a), np.asarray(b)
    return float(np.abs(a - b).max() / np.abs(b).max())


def same_everywhere(everyone: list[dict], case: str) -> str:
    said = {seen[case] for seen in everyone}
    assert len(said) == 1, said
    return said.pop()


@pytest.mark.parametrize("nranks", [2, 3])
def test_two_optimizers_at_once_match_mpis_average(nranks, tmp_path):
    everyone = run("two-optimizers", nranks, tmp_path)
    for seen in everyone:
        for case in ("encoder-decoder", "gan"):
            assert relative(seen[f"{case}, ringlab"], seen[f"{case}, mpi"]) < 1e-5, case
    assert all(np.array_equal(seen["gan, ringlab"], everyone[0]["gan, ringlab"]) for seen in everyone)


@pytest.mark.parametrize("nranks", [2, 3])
def test_logging_and_clipping_between_backward_and_step_match_ddp(nranks, tmp_path):
    everyone = run("between-backward-and-step", nranks, tmp_path)
    for seen in everyone:
        assert relative(seen["ringlab"], seen["ddp"]) < 1e-5
        assert seen["logged losses wrong"] == 0
    said = same_everywhere(everyone, "skip_synchronize")
    assert said.startswith("RuntimeError: DistributedOptimizer follows DDP's contract"), said


@pytest.mark.parametrize("nranks", [2, 3])
def test_the_users_messages_pending_while_the_optimizer_runs(nranks, tmp_path):
    everyone = run("user-messages", nranks, tmp_path)
    for seen in everyone:
        assert relative(seen["ringlab"], seen["mpi"]) < 1e-5
        assert seen["user messages intact, ringlab"] == 10


@pytest.mark.parametrize("nranks", [2, 3])
def test_the_optimizers_param_groups_say_what_is_averaged(nranks, tmp_path):
    everyone = run("param-groups", nranks, tmp_path)
    for seen in everyone:
        assert relative(seen["unnamed parameter, ringlab"], seen["unnamed parameter, mpi"]) < 1e-5
    for case in ("a group added later", "unfrozen later"):
        said = same_everywhere(everyone, case)
        assert said.startswith("RuntimeError: DistributedOptimizer: the optimizer's parameters changed since it "
                               "was built"), said
    for seen in everyone:  # after those failed steps, close() ended the communication thread on every rank
        assert seen["threads ended at close"] == [True] * 5, seen["threads ended at close"]


@pytest.mark.parametrize("nranks", [2, 3])
def test_trainers_built_with_different_options_are_refused_on_every_rank(nranks, tmp_path):
    everyone = run("options", nranks, tmp_path)
    for case, words in (("trace", "trace: rank 0 has True, rank 1 has False"),
                        ("bucket_bytes", "bucket_bytes: rank 0 has 1024, rank 1 has 2048"),
                        ("overlap", "overlap: rank 0 has True, rank 1 has False"),
                        ("lr", "hyperparameters: rank 0 has"),
                        ("bucket_bytes=0", "bucket_bytes must be a whole number of bytes >= 1, got 0")):
        said = same_everywhere(everyone, f"optimizer, {case}")
        assert said.startswith("ValueError: DistributedOptimizer: ") and words in said, (case, said)
    assert "mode: rank 0 has async, rank 1 has sync" in same_everywhere(everyone, "server, mode")
    assert same_everywhere(everyone, "server, lr=nan") == "ValueError: lr must be a finite number > 0, got nan"
    said = same_everywhere(everyone, "server, steps")
    assert said.startswith("ValueError: ParameterServer.run: the ranks disagree (") and "steps: rank 0 has 3" in said
    assert same_everywhere(everyone, "server, after") == "ok"


@pytest.mark.parametrize("nranks", [2, 3])
def test_a_rank_that_steps_once_more_gets_an_error_and_so_do_the_others(nranks, tmp_path):
    everyone = run("steps", nranks, tmp_path)
    first = everyone[0]["said"]
    assert first[:4] == ["ok"] * 4
    others = ", ".join(str(r) for r in range(1, nranks))
    assert first[4].startswith("StepTimeout: DistributedOptimizer, step 4, bucket 0: ") and \
        "did not call it within 3 s" in first[4] and f"rank{'s' * (nranks > 2)} {others}" in first[4], first[4]
    for seen in everyone:
        assert seen["said"][-1] == "ok"  # a collective of the user's afterwards is not disturbed
        assert seen["seconds"] < 60
    assert everyone[0]["after"].startswith("RuntimeError: DistributedOptimizer: an earlier step failed")
    for seen in everyone[1:]:  # the others' next step meets an optimizer that refuses: a timeout naming rank 0
        assert seen["after"].startswith("StepTimeout: DistributedOptimizer, step 4, bucket 0: ") and \
            "within 3 s" in seen["after"] and "rank 0 gave up on call" in seen["after"], seen["after"]


@pytest.mark.parametrize("nranks", [2, 3])
def test_a_parameter_server_whose_run_failed_refuses_to_run_again(nranks, tmp_path):
    """A worker's own code fails in the middle of a run: its run raises that error, the others' raise by their
    deadline; then the server refuses to run again on every rank, at once, since the failed run's pushes may
    still be in flight (it used to run again on the same communicator, where a stale push could be taken)."""
    everyone = run("server-failed", nranks, tmp_path)
    assert everyone[-1]["failed run"] == "RuntimeError: this worker's batch failed"
    for seen in everyone[:-1]:
        assert seen["failed run"].startswith("StepTimeout: rank ") and "ParameterServer: waited more than 3 s" in \
            seen["failed run"], seen["failed run"]
    for seen in everyone:
        assert seen["again"].startswith("RuntimeError: ParameterServer: an earlier run failed ("), seen["again"]
        assert seen["again seconds"] < 1.0 and seen["allreduce after"] == "ok", seen
