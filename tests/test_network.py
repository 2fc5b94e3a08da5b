"""This host's network cards read from a fake sysfs tree, the nodes in discover(), and doctor's "Nodes and
network" section (ringlab.topology.network, ringlab.measure.doctor)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import ringlab as rl
from ringlab.measure.doctor import between_nodes
from ringlab.mpi import nodes
from ringlab.cluster.launch import run_mpi
from ringlab.topology.network import read_network

HERE = Path(__file__).parent / "mpi"
MPICH = "MPICH Version:      5.0.2\nMPICH Release date: ...\nMPICH Device:       ch4:ucx ofi\n"


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def nic(root: Path, name: str, speed: str | None, state: str = "up", device: bool = True, kind: int = 1) -> None:
    folder = root / "sys/class/net" / name
    write(folder / "type", str(kind))
    write(folder / "operstate", state)
    if speed is not None:
        write(folder / "speed", speed)
    if device:
        (folder / "device").mkdir()


def port(root: Path, hca: str, number: int, state: str, rate: str, layer: str = "InfiniBand") -> None:
    folder = root / "sys/class/infiniband" / hca / "ports" / str(number)
    write(folder / "state", state)
    write(folder / "rate", rate)
    write(folder / "link_layer", layer)


@pytest.fixture
def cluster_node(tmp_path):
    """A node with two Ethernet NICs (25 Gb/s, and one that reports -1), one that is down, a bridge,
    loopback, an HDR InfiniBand port that is active, one that is down, and a RoCE port."""
    nic(tmp_path, "eth0", "25000")
    nic(tmp_path, "eth1", "-1")
    nic(tmp_path, "eth2", None, state="down")
    nic(tmp_path, "br0", "10000", device=False)
    nic(tmp_path, "lo", None, state="unknown", device=False, kind=772)
    port(tmp_path, "mlx5_0", 1, "4: ACTIVE", "200 Gb/sec (4X HDR)")
    port(tmp_path, "mlx5_1", 1, "1: DOWN", "10 Gb/sec (4X SDR)")
    port(tmp_path, "mlx5_2", 1, "4: ACTIVE", "100 Gb/sec (4X EDR)", layer="Ethernet")
    return tmp_path


def test_cards_speeds_and_what_was_left_out(cluster_node):
    network = read_network(cluster_node)
    found = {i.name: i for i in network.interfaces}
    assert list(found) == ["eth0", "eth1", "mlx5_0/1", "mlx5_2/1"]
    assert found["eth0"].speed_GBps == pytest.approx(3.125) and found["eth0"].kind == "ethernet"  # 25000 Mb/s / 8000
    assert found["eth0"].source == str(cluster_node / "sys/class/net/eth0/speed")
    assert found["eth1"].speed_GBps is None and found["eth1"].reported == "-1"
    assert found["mlx5_0/1"].speed_GBps == pytest.approx(25.0) and found["mlx5_0/1"].kind == "infiniband"
    assert found["mlx5_0/1"].state == "4: ACTIVE" and found["mlx5_0/1"].reported == "200 Gb/sec (4X HDR)"
    assert found["mlx5_2/1"].kind == "roce" and found["mlx5_2/1"].speed_GBps == pytest.approx(12.5)
    assert network.skipped == {"br0": "virtual: no device behind it", "eth2": "not up: down", "lo": "loopback",
                               "mlx5_1/1": "not active: 1: DOWN"}
    assert network.fastest().name == "mlx5_0/1"
    line = network.describe()
    assert line.startswith("network: fastest mlx5_0/1, 25 GB/s")
    assert "eth1 (ethernet, speed unknown: -1 in" in line and "eth0 (ethernet, 3.12 GB/s = 25000 Mb/s)" in line
    assert "mlx5_1/1 (not active: 1: DOWN)" in line and "lo (loopback)" in line


def test_nothing_to_read_is_unknown(tmp_path):
    assert read_network(tmp_path).interfaces == []
    assert read_network(tmp_path).describe().startswith("network: unknown (neither /sys/class/net")
    nic(tmp_path, "eth0", None, state="down")
    assert read_network(tmp_path).describe() == "network: unknown (no card is up); left out: eth0 (not up: down)"
    nic(tmp_path, "eth1", None)  # up, and its speed file unreadable
    line = read_network(tmp_path).describe()
    assert line.startswith("network: speed unknown for every card") and "eth1/speed unreadable" in line


def test_discover_reports_this_host_as_one_node_and_its_network(cluster_node, monkeypatch):
    monkeypatch.delenv(nodes.SIMULATED, raising=False)
    topology, facts = rl.topology.discover(root=str(cluster_node))
    assert facts["network"] == json.loads(json.dumps(read_network(cluster_node).as_dict()))  # plain data
    assert facts["nodes"]["nodes"] == 1 and facts["nodes"]["simulated"] is None
    assert "is one node (no communicator given" in facts["nodes"]["describe"]
    monkeypatch.setenv(nodes.SIMULATED, "2")
    said = rl.topology.discover(root=str(cluster_node))[1]["nodes"]
    assert said["simulated"] == 2 and "simulated nodes of 2 consecutive ranks" in said["describe"]
    monkeypatch.setenv(nodes.SIMULATED, "two")
    said = rl.topology.discover(root=str(cluster_node))[1]["nodes"]
    assert said["nodes"] is None and "must be a whole number" in said["describe"]


def test_discover_with_a_communicator_asks_every_rank():
    done = run_mpi(4, [str(HERE / "discover_nodes.py")], timeout=120, env={nodes.SIMULATED: "2"})
    assert done.returncode == 0, done.stderr[-3000:]
    said = json.loads(done.stdout.strip().splitlines()[-1])
    assert (said["nodes"], said["ranks"], said["ranks_per_node"], said["simulated"]) == (2, 4, [2], 2)
    assert said["describe"].startswith("2 nodes, 2 ranks per node; simulated nodes")


def test_between_nodes_follows_the_mpi_library_the_cards_and_the_environment(cluster_node, tmp_path):
    with_ib = read_network(cluster_node).as_dict()
    no_ib = read_network(tmp_path / "none").as_dict()
    said = between_nodes(MPICH, no_ib, {}, verbs=False)
    assert said.startswith("MPICH Version: 5.0.2, netmod ucx (the first of this build's 'ch4:ucx ofi')")
    assert "fall back to TCP" in said and "no active InfiniBand/RoCE port; libibverbs not found" in said
    said = between_nodes(MPICH, with_ib, {"UCX_TLS": "rc,sm"}, verbs=True)
    assert "UCX would use InfiniBand/RoCE verbs (mlx5_0/1, mlx5_2/1; libibverbs found)" in said
    assert "the environment says UCX_TLS=rc,sm" in said
    assert "fall back to TCP" in between_nodes(MPICH, with_ib, {}, verbs=False)  # no verbs library: no RDMA
    said = between_nodes(MPICH, with_ib, {"MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp"}, verbs=True)
    assert "netmod ofi (MPIR_CVAR_CH4_NETMOD=ofi): libfabric provider FI_PROVIDER=tcp" in said
    said = between_nodes("Open MPI v5.0.3, package: Open MPI ...", with_ib, {}, verbs=True)
    assert said.startswith("Open MPI v5.0.3") and "chooses its own transport" in said


def test_doctor_prints_nodes_and_network():
    env = {**os.environ, nodes.SIMULATED: "2"}
    done = subprocess.run([sys.executable, "-m", "ringlab", "doctor"], capture_output=True, text=True, timeout=300,
                          env=env)
    assert done.returncode == 0, done.stderr
    section = done.stdout.split("Nodes and network:\n", 1)[1].splitlines()[:4]
    assert section[0].startswith("  nodes: this host, ") and "is one node" in section[0]
    assert section[1].startswith("  simulated nodes: RINGLAB_RANKS_PER_NODE=2: simulated nodes of 2 ranks")
    assert section[2].startswith("  network: ")
    assert section[3].startswith("  between nodes: MPICH") and "netmod" in section[3]
