"""Nodes read from the ranks, or simulated with RINGLAB_RANKS_PER_NODE (ringlab.mpi.nodes): under mpiexec at 4
and 6 ranks with simulated nodes of 2 and 3 ranks, rl.allreduce(x, "hierarchical") equals MPI's Allreduce for
random sizes and its trace crosses between nodes only between ranks of the same local index."""
import json
from pathlib import Path

import pytest

from ringlab.mpi import nodes
from ringlab.cluster.launch import run_mpi

HERE = Path(__file__).parent / "mpi"


@pytest.mark.parametrize("nranks, per_node", [(4, 2), (6, 3)])
def test_hierarchical_on_simulated_nodes_matches_mpi_and_crosses_only_between_its_designated_ranks(nranks, per_node):
    done = run_mpi(nranks, [str(HERE / "check_nodes.py")], timeout=180, env={nodes.SIMULATED: str(per_node)})
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["ids"] == [r // per_node for r in range(nranks)] and seen["local"] == per_node
    assert seen["options"] == {"local": per_node}
    crossing = {tuple(pair) for pair in seen["crossing"]}
    # every rank sends its shard to the rank of the same local index on the other node, and nothing else crosses
    assert crossing == {(r, (r + per_node) % nranks) for r in range(nranks)}
    assert all(src % per_node == dst % per_node for src, dst in crossing)
    assert seen["describe"].startswith(f"2 nodes, {per_node} ranks per node; simulated nodes")


def test_without_the_setting_the_ranks_of_one_host_are_one_node():
    done = run_mpi(3, [str(HERE / "check_nodes.py")], timeout=120, env={nodes.SIMULATED: ""})
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["ids"] == [0, 0, 0] and seen["crossing"] == [] and "shared-memory split" in seen["describe"]


def test_local_size_wants_consecutive_blocks():
    assert nodes.local_size([0, 0, 1, 1, 2]) == 2
    assert nodes.local_size([0, 0, 0]) == 3
    with pytest.raises(ValueError, match=r"node 0 holds ranks \[0, 2\]"):
        nodes.local_size([0, 1, 0, 1])
    with pytest.raises(ValueError, match="different numbers of ranks"):
        nodes.local_size([0, 0, 0, 1, 2, 2, 2])


def test_the_setting_is_read_with_a_clear_error():
    assert nodes.simulated({}) is None and nodes.simulated({nodes.SIMULATED: " 4 "}) == 4
    with pytest.raises(ValueError, match="RINGLAB_RANKS_PER_NODE must be a whole number of ranks per node >= 1, "
                                         "got 'two'"):
        nodes.simulated({nodes.SIMULATED: "two"})
    with pytest.raises(ValueError, match="got '0'"):
        nodes.simulated({nodes.SIMULATED: "0"})


@pytest.mark.parametrize("nranks, per_node", [(4, 2), (3, 2)])
def test_a_slowed_link_between_simulated_nodes_delays_only_the_transfers_that_cross_it(nranks, per_node):
    done = run_mpi(nranks, [str(HERE / "check_slow_link.py")], timeout=180,
                   env={nodes.SIMULATED: str(per_node), nodes.LINK: "0.02"})
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    for algorithm in ("ring", "hierarchical"):
        run = seen[algorithm]
        assert run["crossing_slowed"] and run["inside_not_slowed"], run
        assert run["elapsed"] >= run["link_s"] > 0, run  # the link's time is a floor, whatever else runs


def test_the_link_setting_is_read_with_a_clear_error():
    assert nodes.simulated_link({}) is None
    assert nodes.simulated_link({nodes.SIMULATED: "2", nodes.LINK: "1.5"}) == 1.5e9
    with pytest.raises(ValueError, match="RINGLAB_NODE_LINK_GBPS must be a bandwidth in GB/s > 0, got 'fast'"):
        nodes.simulated_link({nodes.SIMULATED: "2", nodes.LINK: "fast"})
    with pytest.raises(ValueError, match="got '-1'"):
        nodes.simulated_link({nodes.SIMULATED: "2", nodes.LINK: "-1"})
    with pytest.raises(ValueError, match="set RINGLAB_RANKS_PER_NODE too"):
        nodes.simulated_link({nodes.LINK: "1"})


def test_simulated_nodes_sets_and_restores_the_environment(monkeypatch):
    import os

    monkeypatch.delenv(nodes.SIMULATED, raising=False)
    monkeypatch.setenv(nodes.LINK, "")
    with nodes.simulated_nodes(2, link_gbps=0.5):
        assert nodes.simulated() == 2 and nodes.simulated_link() == 0.5e9
    assert nodes.SIMULATED not in os.environ and os.environ[nodes.LINK] == ""
    with pytest.raises(ValueError, match="bandwidth in GB/s > 0"):
        with nodes.simulated_nodes(2, link_gbps=0):
            pass
    assert nodes.SIMULATED not in os.environ
