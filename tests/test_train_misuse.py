"""The DistributedOptimizer and the parameter server under gradient accumulation, unused parameters,
different models and use after close: DDP's weights where there is a right answer, otherwise the
same clear error on every rank."""
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch", reason="torch is not installed (the train extra)")

from ringlab.cluster.launch import run_mpi  # noqa: E402

SCRIPT = Path(__file__).parent / "mpi" / "train_misuse.py"


def run(mode: str, nranks: int, tmp_path) -> list[dict]:
    out = tmp_path / f"{mode}.json"
    done = run_mpi(nranks, [str(SCRIPT), mode, str(out)], timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


def relative(a, b) -> float:
    a, b = np.asarray(a), np.asarray(b)
    return float(np.abs(a - b).max() / np.abs(b).max())


@pytest.mark.parametrize("nranks", [2, 3])
def test_accumulating_gradients_with_overlap_matches_ddp_no_sync(nranks, tmp_path):
    everyone = run("accumulate", nranks, tmp_path)
    for seen in everyone:
        assert relative(seen["no_sync"], seen["ddp"]) < 1e-5
        assert relative(seen["passes"], seen["ddp"]) < 1e-5
        assert seen["twice without no_sync"].startswith("RuntimeError: DistributedOptimizer: a backward pass added")
        assert seen["step after close"] == ("RuntimeError: DistributedOptimizer: step() or synchronize() "
                                            "after close()")
    assert all(np.array_equal(seen["no_sync"], everyone[0]["no_sync"]) for seen in everyone)


@pytest.mark.parametrize("nranks", [2, 3])
def test_parameters_unused_on_some_ranks_match_ddp_find_unused(nranks, tmp_path):
    everyone = run("unused", nranks, tmp_path)
    for seen in everyone:
        assert relative(seen["ringlab"], seen["ddp"]) < 1e-5
    assert all(np.array_equal(seen["ringlab"], everyone[0]["ringlab"]) for seen in everyone)


def test_different_models_are_refused_on_every_rank(tmp_path):
    everyone = run("models", 3, tmp_path)
    for what in ("optimizer", "parameter server"):
        said = {seen[f"{what}, another model on rank 1"] for seen in everyone}
        assert len(said) == 1, said
        (message,) = said
        assert message.startswith("ValueError: ") and "the ranks disagree (" in message
        assert "parameters: rank 0 has 6, rank 1 has 8" in message
    assert {seen["parameter server, a parameter without gradient"] for seen in everyone} == {"ok"}
