"""ringlab bench, bandwidth, doctor and topology discovery (CPU; the GPU parts skip without a GPU)."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ringlab.measure.bench import _wrong, sweep
from ringlab.mpi.devices import cupy_module
from ringlab.topology import discover, parse_topo, pcie_bandwidth, topology_from_codes

import ringlab as rl

DATA = Path(rl.__file__).parent / "data" / "topo"


def ringlab(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "ringlab", *args], capture_output=True, text=True, timeout=timeout)


def test_sweep_like_nccl_tests():
    assert sweep(8, 64, factor=2) == [8, 16, 32, 64]
    assert sweep(1024, 4096, increment=1024) == [1024, 2048, 3072, 4096]
    for kwargs, message in [(dict(factor=1), "factor must be >= 2"), (dict(factor=2, increment=8), "exactly one"),
                            (dict(increment=0), "increment must be >= 1")]:
        with pytest.raises(ValueError, match=message):
            sweep(8, 64, **kwargs)
    with pytest.raises(ValueError, match="need 1 <= begin <= end"):
        sweep(64, 8, factor=2)
    # ringlab bench -b 1 -e 1T -i 1: refused at once (it built a list of a trillion sizes first, 1.35 GB in 15 s)
    with pytest.raises(ValueError, match="1,099,511,627,776 sizes from 1 to 1099511627776 bytes by 1: a sweep takes "
                                         "at most 4,096"):
        sweep(1, 1 << 40, increment=1)
    assert len(sweep(1, 4096, increment=1)) == 4096 and sweep(1, 1 << 40, factor=2)[-1] == 1 << 40


def test_wrong_elements_are_counted():
    want = np.arange(10, dtype=np.float32)
    got = want.copy()
    got[[2, 7]] += 1
    assert _wrong(got, want, np.dtype(np.float32), 4) == 2
    assert _wrong(want + 1e-7, want, np.dtype(np.float32), 4) == 0  # float rounding is not wrong
    assert _wrong(np.array([1, 2, 3]), np.array([1, 2, 4]), np.dtype(np.int64), 2) == 1
    # scratch never written (NaN), an overflow (inf), a NaN where MPI had one: wrong, all of them
    for dtype in (np.float16, np.float32, np.float64, rl.mpi.reduction.bfloat16()):
        left = want.astype(dtype)
        left[[1, 4]] = [np.nan, np.inf]
        assert _wrong(left, want.astype(dtype), np.dtype(dtype), 2) == 2, dtype
        assert _wrong(want.astype(dtype), left, np.dtype(dtype), 2) == 2, dtype
        assert _wrong(left, left, np.dtype(dtype), 2) == 2, dtype


SCHEMA = {
    "type": "object",
    "required": ["kind", "schema", "collective", "ranks", "dtype", "machine", "rows", "mean_busbw_Bps"],
    "properties": {
        "kind": {"const": "ringlab-bench"},
        "ranks": {"type": "integer", "minimum": 1},
        "machine": {"type": "object", "required": ["date", "command", "cpu", "mpi", "versions", "gpus", "driver"]},
        "rows": {"type": "array", "minItems": 1, "items": {
            "type": "object",
            "required": ["bytes", "count", "dtype", "algorithm", "time_s", "algbw_Bps", "busbw_Bps", "wrong"],
            "properties": {"time_s": {"type": "number", "exclusiveMinimum": 0},
                           "wrong": {"type": "integer", "minimum": 0}}}},
    },
}


@pytest.mark.parametrize("collective, algorithms, extra", [
    ("allreduce", "ring,rhd,ps,mpi", ["--inplace"]),
    ("reduce", "tree,chain,mpi", ["--root", "1"]),
    ("broadcast", "chain,tree,mpi", ["--root", "1", "-d", "int32", "--inplace"]),
    ("reduce_scatter", "ring,mpi", ["-d", "float64", "--inplace"]),
    ("allgather", "ring,mpi", ["-d", "int64"]),
])
def test_bench_on_two_and_three_ranks_checks_its_own_results(tmp_path, collective, algorithms, extra):
    import jsonschema

    for nranks in (2, 3):
        out = tmp_path / f"{collective}-{nranks}.json"
        done = ringlab("bench", "-n", str(nranks), "-c", collective, "-a", algorithms, "-b", "64", "-e", "256K",
                       "-f", "16", "--iters", "3", "-w", "1", "--json", str(out), *extra)
        assert done.returncode == 0, done.stderr[-2000:]
        result = json.loads(out.read_text())
        jsonschema.validate(result, SCHEMA)
        assert result["ranks"] == nranks and result["collective"] == collective
        assert result["machine"]["command"].startswith(f"ringlab bench -n {nranks} ")  # what reruns it
        assert {r["algorithm"] for r in result["rows"]} == set(algorithms.split(","))
        assert all(r["wrong"] == 0 for r in result["rows"])
        factor = {"allreduce": 2 * (nranks - 1) / nranks, "reduce_scatter": (nranks - 1) / nranks,
                  "allgather": (nranks - 1) / nranks}.get(collective, 1.0)
        assert all(r["busbw_Bps"] == pytest.approx(r["algbw_Bps"] * factor) for r in result["rows"])
        assert "# mean busbw (GB/s): " in done.stdout
        if "--inplace" in extra:  # in place beside out of place, checked the same way (MPI: MPI_IN_PLACE allreduce)
            for r in result["rows"]:
                if r["algorithm"] != "mpi" or collective == "allreduce":
                    assert r["inplace_time_s"] > 0 and r["inplace_wrong"] == 0
                    assert r["inplace_busbw_Bps"] == pytest.approx(r["bytes"] / r["inplace_time_s"] * factor)
                else:
                    assert r["inplace_time_s"] is None
            assert "in place (us)" in done.stdout
        else:
            assert all("inplace_time_s" not in r for r in result["rows"])


@pytest.mark.parametrize("nranks", [2, 3])
def test_bench_reduces_by_every_op_and_in_bfloat16_checked_against_mpi(tmp_path, nranks):
    """nccl-tests' -o and -d bfloat16: every op's rows checked against MPI's own op (avg: MPI's sum / n),
    bfloat16 against MPI's float32 reduction of the same values, MPI's bfloat16 row left out and said so."""
    runs = [("allreduce", "ring,rhd,mpi", op, "float32") for op in ("prod", "max", "min", "avg")]
    runs += [("allreduce", "ring,naive,mpi", "avg", "int32"), ("reduce", "tree,mpi", "max", "int64"),
             ("reduce_scatter", "ring,mpi", "min", "float64"), ("allreduce", "ring,naive,mpi", "sum", "bfloat16")]
    for collective, algorithms, op, dtype in runs:
        out = tmp_path / f"{collective}-{op}-{dtype}.json"
        done = ringlab("bench", "-n", str(nranks), "-c", collective, "-a", algorithms, "-o", op, "-d", dtype,
                       "-b", "64", "-e", "64K", "-f", "32", "--iters", "2", "-w", "1", "--json", str(out),
                       *(["--root", "1"] if collective == "reduce" else []), *(["--inplace"] if op == "prod" else []))
        assert done.returncode == 0, done.stderr[-2000:]
        result = json.loads(out.read_text())
        assert result["op"] == op and {r["op"] for r in result["rows"]} == {op}, (collective, op)
        assert all(r["wrong"] == 0 and r.get("inplace_wrong") in (0, None) for r in result["rows"]), (collective, op)
        assert f"{dtype}, op {op}," in done.stdout
        timed = {r["algorithm"] for r in result["rows"]}
        if dtype == "bfloat16":
            assert timed == {"ring", "naive"} and "mpi" in result["left_out"]
            assert "left out: mpi: MPI has no bfloat16 type" in done.stdout
        else:
            assert timed == set(algorithms.split(",")) and result["left_out"] == {}


def test_bench_rejects_bad_input():
    done = ringlab("bench", "-n", "2", "-c", "broadcast", "-a", "chain", "-o", "max")
    assert done.returncode == 2 and "op='max' reduces, and broadcast reduces nothing" in done.stderr
    done = ringlab("bench", "-n", "2", "-o", "mean")
    assert done.returncode == 2 and "op must be one of sum, prod, max, min, avg" in done.stderr
    done = ringlab("bench", "-n", "2", "-a", "mpi", "-d", "bfloat16")
    assert done.returncode == 2 and "nothing left to time: mpi: MPI has no bfloat16 type" in done.stderr
    done = ringlab("bench", "-n", "2", "-c", "alltoall")
    assert done.returncode == 2 and "collective must be one of reduce, broadcast, allreduce" in done.stderr
    done = ringlab("bench", "-n", "2", "-a", "gossip")
    assert done.returncode == 2 and "no allreduce implementation 'gossip'" in done.stderr


def test_bandwidth_without_gpus_measures_copies_and_ping_pong(tmp_path):
    out = tmp_path / "bw.json"
    done = ringlab("bandwidth", "-n", "2", "--sizes", "8,4K,1M", "--json", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    cpu = result["cpu"]
    assert cpu["memcpy_Bps"] > 0 and [r["bytes"] for r in cpu["pingpong"]] == [8, 4096, 1 << 20]
    assert all(r["one_way_s"] > 0 and r["ratio_to_memcpy"] >= 0 for r in cpu["pingpong"])
    assert "memory copy rate" in done.stdout and "ratio" in done.stdout
    assert result["machine"]["command"].startswith("ringlab bandwidth")


def test_doctor_says_what_each_lab_will_do():
    done = ringlab("doctor")
    assert done.returncode == 0, done.stderr
    assert "MPI: MPICH" in done.stdout
    for lab in ("00 Your machine", "03 Allreduce", "06 Data-parallel training"):
        assert lab in done.stdout
    if cupy_module() is None:
        assert "GPUs: none usable here" in done.stdout
    plans = done.stdout.split("What each lab will do here:")[1].splitlines()[1:]
    from ringlab.measure.doctor import WIDTH
    assert plans and all(len(line) <= WIDTH for line in plans)  # a notebook's output never wraps them mid-column
    assert all(line.startswith("  0") or line.startswith("  1") or line.startswith(" " * 37) for line in plans)


def test_pcie_arithmetic():
    assert pcie_bandwidth(2, 8) == pytest.approx(4e9)  # 5 GT/s x 8b/10b x 8 lanes
    assert pcie_bandwidth(3, 16) == pytest.approx(15.754e9, rel=1e-4)  # 8 GT/s x 128b/130b x 16
    assert pcie_bandwidth(4, 16) == pytest.approx(2 * pcie_bandwidth(3, 16))
    with pytest.raises(ValueError, match="PCIe generation must be one of"):
        pcie_bandwidth(7, 16)
    with pytest.raises(ValueError, match="PCIe width must be"):
        pcie_bandwidth(3, 3)


def test_topo_parser_on_recorded_outputs():
    a100 = parse_topo((DATA / "dgx-a100-partial.txt").read_text())
    assert a100.gpus == [f"GPU{i}" for i in range(8)] and len(a100.devices) == 20
    assert a100.codes[("GPU0", "GPU5")] == "NV12" and a100.codes[("GPU2", "NIC2")] == "PXB"
    assert a100.cpu_affinity["GPU2"] == "16-31,144-159"
    topo = topology_from_codes(a100.gpu_codes())
    assert topo.bandwidth_matrix()[0, 7] == pytest.approx(12 * 25e9)  # 12 NVLinks
    rtx4090 = parse_topo((DATA / "rtx4090x8.txt").read_text())
    assert len(rtx4090.gpus) == 8 and rtx4090.codes[("NIC0", "GPU6")] == "PHB"
    kinds = [topo.links[c // 2].kind for topo in [topology_from_codes(rtx4090.gpu_codes())]
             for c in topo.route(0, 1)]
    assert "qpi" in kinds  # SYS: across the SMP interconnect
    rtx5090 = parse_topo((DATA / "rtx5090x2.txt").read_text())
    assert rtx5090.gpu_codes() == [["X", "PHB"], ["PHB", "X"]]
    assert len(topology_from_codes(rtx5090.gpu_codes()).route(0, 1)) == 2  # up to the host bridge and down


def test_topo_parser_errors():
    with pytest.raises(ValueError, match="header line with GPU0"):
        parse_topo("no matrix here")
    with pytest.raises(ValueError, match="unknown connection 'FAST'"):
        parse_topo("\tGPU0\tGPU1\nGPU0\t X \tFAST\nGPU1\tFAST\t X \n")


def test_pcie_tree_from_codes():
    codes = [["X", "PIX", "PHB", "SYS"], ["PIX", "X", "PHB", "SYS"], ["PHB", "PHB", "X", "SYS"],
             ["SYS", "SYS", "SYS", "X"]]
    topo = topology_from_codes(codes)
    assert len(topo.route(0, 1)) == 2  # through their switch
    assert len(topo.route(0, 2)) > len(topo.route(0, 1))
    assert any(topo.links[c // 2].kind == "qpi" for c in topo.route(0, 3))


@pytest.mark.skipif(cupy_module() is not None, reason="this machine has a GPU")
def test_discover_without_a_gpu_says_why():
    topology, facts = discover()
    assert topology is None and "NVML" in facts["reason"]
    assert rl.topology.discover() == (topology, facts)  # the public name


def test_nvlink_rates_follow_nvml_version_numbers():
    from ringlab.topology.presets import nvlink_per_link

    assert nvlink_per_link(1) == pytest.approx(20e9)   # NVML_NVLINK_VERSION_1_0: P100, 40 GB/s both ways
    assert nvlink_per_link(2) == pytest.approx(25e9)   # 2.0: V100, 50 GB/s both ways
    assert nvlink_per_link(6) == pytest.approx(25e9)   # 4.0: H100, 18 links = 450 GB/s each way
    assert 18 * nvlink_per_link(6) == pytest.approx(450e9)
    assert nvlink_per_link(7) == pytest.approx(50e9)   # 5.0
    assert nvlink_per_link(7, hopper=True) == pytest.approx(25e9)  # drivers that report 5.0 for an H100
    assert nvlink_per_link(0) == pytest.approx(25e9)   # unknown


def test_gpus_behind_nvswitches_are_linked_to_each_other():
    from ringlab.topology.nvml import switch_links

    links = switch_links([18, 18, 18, 18])  # an HGX H100 board: every GPU's 18 links go to the switches
    assert links.tolist() == [[0 if i == j else 18 for j in range(4)] for i in range(4)]
    assert switch_links([12, 0, 12]).tolist() == [[0, 0, 12], [0, 0, 0], [12, 0, 0]]  # GPU 1 has none


def test_every_result_names_the_code_that_measured_it(monkeypatch, tmp_path):
    from ringlab.measure.machine import describe_machine, ringlab_source

    monkeypatch.delenv("RINGLAB_COMMIT", raising=False)  # what a copy sent elsewhere sets (see below)
    head = subprocess.run(["git", "-C", str(Path(__file__).parents[1]), "rev-parse", "HEAD"], capture_output=True,
                          text=True)
    source = describe_machine()["ringlab"]
    assert source["version"] == rl.__version__
    if head.returncode == 0:  # a checkout: its commit, and whether files differ from it
        assert source["commit"] == head.stdout.strip() and isinstance(source["dirty"], bool)
    monkeypatch.setenv("RINGLAB_COMMIT", "0123abc")  # a copy says its commit, whatever git there says
    assert ringlab_source() == {"version": rl.__version__, "commit": "0123abc", "dirty": None}
    monkeypatch.setenv("PATH", str(tmp_path))  # no git at all
    monkeypatch.delenv("RINGLAB_COMMIT")
    assert ringlab_source() == {"version": rl.__version__, "commit": None, "dirty": None}
