"""ringlab.train.tensor and .mesh: an MLP split over 2, 3 and 4 real ranks equals the unsplit one (forward and every
gradient, float64), and a data x tensor mesh of every shape, both mappings, trains as one process does."""
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the train extra)")

import ringlab as rl  # noqa: E402
from ringlab.cluster.launch import run_mpi  # noqa: E402
from ringlab.train.tensor import group_link, mesh_groups, split_mlp  # noqa: E402

SCRIPT = Path(__file__).parent / "mpi" / "tensor_equivalence.py"


@pytest.mark.parametrize("nranks", [2, 3, 4])
def test_split_mlp_and_every_mesh_equal_the_unsplit_model(nranks):
    done = run_mpi(nranks, [str(SCRIPT)], timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    meshes = [row for row in rows if row["check"].startswith("mesh")]
    assert len(rows) - len(meshes) == 6 and len(meshes) == 2 * sum(nranks % d == 0 for d in range(1, nranks + 1))
    for row in rows:
        assert row["difference"] < 1e-9, row


def test_mesh_groups_put_the_tensor_dimension_inside_or_across():
    assert mesh_groups(8, 2, 4) == ([[0, 1, 2, 3], [4, 5, 6, 7]], [[0, 4], [1, 5], [2, 6], [3, 7]])
    assert mesh_groups(8, 2, 4, tensor_inner=False) == ([[0, 2, 4, 6], [1, 3, 5, 7]], [[0, 1], [2, 3], [4, 5], [6, 7]])
    with pytest.raises(ValueError, match="a 2 x 3 mesh needs 6 ranks; there are 8"):
        mesh_groups(8, 2, 3)
    with pytest.raises(ValueError, match="tensor must be a whole number"):
        mesh_groups(8, 8, 0)


def test_a_group_inside_a_node_has_nvlink_and_across_nodes_the_network():
    topology = rl.topology.preset("ib-2x8-h100")
    inside, across = group_link(topology, [0, 1]), group_link(topology, [0, 8])
    assert inside[0] > 7 * across[0] and inside[1] < across[1]
    assert across[0] == pytest.approx(48e9)  # a 400 Gbit/s NIC as NCCL rates it
    with pytest.raises(ValueError, match="a group of one rank"):
        group_link(topology, [3])


def test_split_mlp_refuses_what_it_cannot_split():
    from mpi4py import MPI

    with pytest.raises(ValueError, match="takes Sequential\\(Linear, activation, Linear\\)"):
        split_mlp(torch.nn.Sequential(torch.nn.Linear(2, 3)), MPI.COMM_SELF)
    with pytest.raises(ValueError, match="outputs are not the second's"):
        split_mlp(torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.ReLU(), torch.nn.Linear(4, 2)), MPI.COMM_SELF)
