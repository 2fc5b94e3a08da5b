"""Reading nccl-tests logs (``ringlab import``). The logs are written here with nccl-tests' own
printf formats (src/util.cu: writeBenchmarkLinePreamble, writeBenchmarkLineBody, getFloatStr,
writeDeviceReport, the header and footer), from numbers made up to be self-consistent, not copied
from anywhere."""
import json
import subprocess
import sys

import pytest

from ringlab.measure.logs import LogFormatError, read_log, read_nccl_tests
from ringlab.schedule import bus_factor


def float_str(value: float, width: int) -> str:
    """nccl-tests' getFloatStr: the most decimals that fit the width."""
    for fmt in (f"%{width}.2f", f"%{width}.1f", f"%{width}.0f"):
        text = fmt % value
        if len(text) <= width:
            return text
    return (f"%{width}.1e" if width >= 7 else f"%{width}.0e") % value


def nccl_log(program="all_reduce_perf", kind="allreduce", nranks=8, sizes=(8, 1024, 1 << 20, 1 << 26),
             dtype="float", redop="sum", root=-1, version_line=True, check=True, per_iteration=False, prefix="",
             devices=True):
    """A log as nccl-tests prints it, with time = 20 us + size / 100 GB/s."""
    out = []
    if version_line:
        out += ["# nccl-tests version 2.17.6 nccl-headers=22703 nccl-library=22703",
                f"# Collective test starting: {program}"]
    out.append(f"# nThread 1 nGpus 1 minBytes {sizes[0]} maxBytes {sizes[-1]} step: 2(factor) warmup iters: 5 "
               "iters: 20 agg iters: 1 validation: 1 graph: 0" + (" unalign: 0" if version_line else ""))
    if per_iteration:
        out.append("# Per-Iteration Report: CUDA event timing; i_* uses max over process rows ")
    out += ["#", "# Using devices"]
    for rank in range(nranks if devices else 0):
        out.append("#  Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x:%02x] %s"
                   % (rank, 0, 4000 + rank, "node1", rank, 0, 0x19 + rank, 0, "NVIDIA H100 80GB HBM3"))
    if not version_line:
        out.append("NCCL version 2.18.3+cuda12.2")
    out.append("#")
    if per_iteration:
        out.append("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s"
                   % ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "i_min",
                      "i_max", "i_p99", "i_cv%", "time", "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99", "i_cv%"))
    else:
        out.append("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          "
                   % ("", "", "", "", ""))
        out.append("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s"
                   % ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
                      "busbw", "#wrong"))
    factor = bus_factor(kind, nranks)
    expected = []
    for size in sizes:
        line = "%12li  %12li  %8s  %6s  %6s" % (size, size // 4, dtype, redop, "%6i" % root)
        row = {}
        for place, extra_us in (("", 0.0), ("inplace_", 1.0)):
            time_us = 20.0 + extra_us + size / 100e3
            algbw = size / time_us / 1e3
            busbw = algbw * factor
            wrong = 0 if check else None
            body = (f"  {float_str(time_us, 7)}  {float_str(algbw, 6)}  {float_str(busbw, 6)}  "
                    + ("%6g" % 0 if check else "   N/A"))
            if per_iteration:
                body += "  %7s  %7s  %7s  %7s" % (float_str(time_us * 0.9, 7), float_str(time_us * 1.1, 7),
                                                   float_str(time_us * 1.05, 7), float_str(1.5, 7))
            line += body
            row.update({f"{place}time_s": float(float_str(time_us, 7)) * 1e-6,
                        f"{place}busbw_Bps": float(float_str(busbw, 6)) * 1e9, f"{place}wrong": wrong})
        out.append(line)
        expected.append(row)
    out += ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 114.389 ", "#",
            f"# Collective test concluded: {program}", ""]
    return "\n".join(prefix.format(rank=0) + line for line in out), expected


def test_a_recent_all_reduce_log():
    text, expected = nccl_log()
    got = read_log(text)
    assert (got["format"], got["collective"], got["ranks"]) == ("nccl-tests", "allreduce", 8)
    assert got["nccl_version"] == "2.27.3" and got["nccl_tests_version"] == "2.17.6"
    assert got["avg_busbw_Bps"] == pytest.approx(114.389e9) and got["out_of_bounds"] == 0
    assert got["threads"] == 1 and got["gpus_per_thread"] == 1  # "# nThread 1 nGpus 1": one GPU a process
    assert [d["name"] for d in got["devices"]] == ["NVIDIA H100 80GB HBM3"] * 8
    assert [r["bytes"] for r in got["rows"]] == [8, 1024, 1 << 20, 1 << 26]
    for row, want in zip(got["rows"], expected):
        assert row["count"] == row["bytes"] // 4 and row["dtype"] == "float"
        for key, value in want.items():
            assert row[key] == pytest.approx(value, rel=1e-9), key


@pytest.mark.parametrize("prefix", ["[{rank},0]<stdout>:", "[{rank}] "])
def test_an_old_log_under_mpirun_names_its_collective_by_its_columns(prefix):
    """Before 2.14 nccl-tests printed no program name: reduce_scatter on 4 ranks shows busbw/algbw = 3/4."""
    text, expected = nccl_log(program="reduce_scatter_perf", kind="reduce_scatter", nranks=4, version_line=False,
                              prefix=prefix)
    got = read_nccl_tests(text)
    assert got["collective"] == "reduce_scatter" and got["ranks"] == 4 and got["nccl_version"] == "2.18.3+cuda12.2"
    assert len(got["rows"]) == len(expected)


def test_rooted_and_unchecked_and_per_iteration_logs():
    text, _ = nccl_log(program="broadcast_perf", kind="broadcast", redop="none", root=0, version_line=False)
    assert read_nccl_tests(text)["collective"] == "broadcast"
    unchecked = read_log(nccl_log(check=False)[0])
    assert all(r["wrong"] is None and r["inplace_wrong"] is None for r in unchecked["rows"])  # -c 0 prints N/A
    text, expected = nccl_log(per_iteration=True)
    rows = read_log(text)["rows"]
    assert [r["inplace_busbw_Bps"] for r in rows] == pytest.approx([e["inplace_busbw_Bps"] for e in expected])


# NCCL_DEBUG=INFO lines, in NCCL's format (src/debug.cc: "host:pid:tid [dev] NCCL INFO ..."), with the messages
# of AWS's plugin (aws-ofi-nccl: "NET/OFI " + "Selected provider is %s, fabric is %s (found %d nics)"; its
# releases before 1.8 said "Selected Provider is efa" and named the network "AWS Libfabric") and of NCCL's IB
# transport (src/transport/net_ib/init.cc: "NET/IB : Using [d]dev:port/IB|RoCE ...; OOB if:addr")
NETWORK_LINES = {
    "efa": ["node1:4000:4000 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.16.0",
            "node1:4000:4000 [0] NCCL INFO NET/OFI Selected provider is efa, fabric is efa-direct (found 8 nics)",
            "node1:4000:4000 [0] NCCL INFO Using network Libfabric"],
    "efa-old": ["node1:4000:4000 [0] NCCL INFO NET/OFI Selected Provider is efa",
                "node1:4000:4000 [0] NCCL INFO Using network AWS Libfabric"],
    "ib": ["node1:4000:4000 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/IB [RO]; OOB ib0:10.0.0.1<0>",
           "node1:4000:4000 [0] NCCL INFO Using network IB"],
    "roce": ["node1:4000:4000 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [RO]; OOB eth0:10.0.0.1<0>"],
    # aws-ofi-nccl on HPE Cray EX: libfabric's cxi provider is Slingshot
    "slingshot": ["nid001:4000:4000 [0] NCCL INFO NET/OFI Selected provider is cxi, fabric is cxi (found 4 nics)"],
    None: ["node1:4000:4000 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>",
           "node1:4000:4000 [0] NCCL INFO Using network Socket"],
}


@pytest.mark.parametrize("kind", list(NETWORK_LINES))
def test_the_network_nccl_used_is_read_from_its_info_lines(kind):
    text, expected = nccl_log()
    lines = text.splitlines()
    got = read_log("\n".join(lines[:6] + NETWORK_LINES[kind] + lines[6:]))
    assert got["network"] == (kind.removesuffix("-old") if kind else None)
    assert len(got["rows"]) == len(expected) and got["left_out"] == []  # INFO lines are no rows, nor lost ones
    assert read_log(text)["network"] is None  # no INFO lines: not said


def test_what_is_not_an_nccl_tests_log_is_a_clear_error():
    with pytest.raises(LogFormatError, match="tried: nccl-tests, nvbandwidth, p2pBandwidthLatencyTest, bandwidthTest"):
        read_log("Device 0: NVIDIA H100\nsome other tool\n")
    header_only = "\n".join(line for line in nccl_log()[0].splitlines() if line.startswith("#"))
    with pytest.raises(LogFormatError, match="without a single result row"):
        read_log(header_only)
    text, _ = nccl_log(version_line=False, devices=False)  # neither program name nor ranks
    got = read_log(text)  # busbw / algbw = 1.75 with a reduction and no root: allreduce on 8 ranks, nothing else
    assert (got["collective"], got["collective_from"], got["ranks"], got["ranks_from"]) == (
        "allreduce", "columns", 8, "busbw / algbw")
    assert read_log(text, collective="allreduce")["collective_from"] == "given"
    text, _ = nccl_log(program="alltoall_perf", kind="alltoall", redop="none", version_line=False, devices=False)
    with pytest.raises(LogFormatError, match=r"fit allgather or alltoall or alltoallv \(busbw / algbw = 0.875.*--collective"):
        read_log(text)  # allgather, alltoall and alltoallv print the same columns and the same factor
    assert read_log(text, collective="alltoall")["ranks"] == 8
    with pytest.raises(LogFormatError, match="ran all_reduce_perf, which is allreduce, not the broadcast given"):
        read_log(nccl_log()[0], collective="broadcast")


def test_ringlab_import_prints_the_table_and_writes_json(tmp_path):
    log = tmp_path / "all_reduce.log"
    log.write_text(nccl_log()[0])
    out = tmp_path / "h100.json"
    done = subprocess.run([sys.executable, "-m", "ringlab", "import", str(log), "--json", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "allreduce on 8 ranks (NVIDIA H100 80GB HBM3), NCCL 2.27.3" in done.stdout
    data = json.loads(out.read_text())
    assert data["collective"] == "allreduce" and data["ranks"] == 8
    assert set(data["rows"][0]) >= {"bytes", "count", "dtype", "time_s", "algbw_Bps", "busbw_Bps", "wrong",
                                    "inplace_time_s", "inplace_algbw_Bps", "inplace_busbw_Bps", "inplace_wrong"}
    bad = tmp_path / "notes.txt"
    bad.write_text("hello\n")
    done = subprocess.run([sys.executable, "-m", "ringlab", "import", str(bad)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and "notes.txt: not a log ringlab can read (tried: nccl-tests, nvbandwidth, p2pBandwidthLatencyTest, bandwidthTest)" in done.stderr


def p2p_log(n=2, reads=False, can=lambda i, j: True, old_titles=False):
    """p2pBandwidthLatencyTest's output (cuda-samples p2pBandwidthLatencyTest.cu's printfs), with
    matrix entries 10*i + j + offset so that each cell says where it came from."""
    out = ["[P2P (Peer-to-Peer) GPU Bandwidth Latency Test]"]
    for i in range(n):
        out.append("Device: %d, %s, pciBusID: %x, pciDeviceID: %x, pciDomainID:%x" % (i, "NVIDIA H100 80GB HBM3",
                                                                                  0x19 + i, 0, 0))
    for i in range(n):
        for j in range(n):
            if i != j:
                out.append("Device=%d %s Access Peer Device=%d" % (i, "CAN" if can(i, j) else "CANNOT", j))
    out += ["", "***NOTE: In case a device doesn't have P2P access to other one, it falls back to normal memcopy "
            "procedure.", "So you can see lesser Bandwidth (GB/s) and unstable Latency (us) in those cases.", ""]
    out.append("P2P Connectivity Matrix")
    out.append("     D\\D" + "".join("%6d" % j for j in range(n)))
    for i in range(n):
        out.append("%6d\t" % i + "".join("%6d" % (1 if i == j or can(i, j) else 0) for j in range(n)))

    def matrix(offset, corner="   D\\D"):
        lines = [corner + "".join("%6d " % j for j in range(n))]
        for i in range(n):
            lines.append("%6d " % i + "".join("%6.02f " % (10 * i + j + offset) for j in range(n)))
        return lines
    enabled = "" if old_titles else " (P2P Writes)"
    out += ["Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)"] + matrix(100)
    out += [f"Unidirectional P2P=Enabled Bandwidth{enabled} Matrix (GB/s)"] + matrix(200)
    if reads:
        out += ["Unidirectional P2P=Enabled Bandwidth (P2P Reads) Matrix (GB/s)"] + matrix(250)
    out += ["Bidirectional P2P=Disabled Bandwidth Matrix (GB/s)"] + matrix(300)
    out += ["Bidirectional P2P=Enabled Bandwidth Matrix (GB/s)"] + matrix(400)
    for title, offset in (("P2P=Disabled Latency Matrix (us)", 500), (f"P2P=Enabled Latency{enabled} Matrix (us)", 600)):
        out += [title] + matrix(offset, "   GPU") + [""] + matrix(offset + 50, "   CPU")
    if reads:
        out += ["P2P=Enabled Latency (P2P Reads) Matrix (us)"] + matrix(650, "   GPU") + [""] + matrix(700, "   CPU")
    out += ["", "NOTE: The CUDA Samples are not meant for performance measurements. Results may vary when GPU Boost "
            "is enabled."]
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("old_titles", [False, True])
def test_p2p_bandwidth_latency_matrices(old_titles):
    got = read_log(p2p_log(n=3, can=lambda i, j: {i, j} != {0, 2}, old_titles=old_titles))
    assert got["format"] == "p2pBandwidthLatencyTest" and len(got["devices"]) == 3
    assert got["devices"][1] == {"device": 1, "name": "NVIDIA H100 80GB HBM3", "bus": "0000:1a:00"}
    m = got["matrices"]
    assert set(m) == {"connectivity", "unidirectional_disabled", "unidirectional_enabled", "bidirectional_disabled",
                      "bidirectional_enabled", "latency_gpu_disabled", "latency_gpu_enabled", "latency_cpu_disabled",
                      "latency_cpu_enabled"}
    assert m["connectivity"][0] == [1, 1, 0]
    assert m["unidirectional_enabled"][2][1] == 221.0  # row = source GPU 2, column = peer 1
    assert m["latency_cpu_disabled"][1][0] == 560.0 and m["latency_gpu_enabled"][0][2] == 602.0
    assert got["p2p_method"] == "writes"


def test_p2p_reads_replace_the_writes():
    got = read_log(p2p_log(reads=True))
    assert got["p2p_method"] == "reads"
    assert got["matrices"]["unidirectional_enabled"][0][1] == 251.0
    assert got["matrices"]["latency_cpu_enabled"][1][1] == 711.0  # the reads CPU matrix: offset 700


def bandwidth_test_log(mode="Quick", unit="GB", csv=False):
    """cuda-samples bandwidthTest's output (bandwidthTest.cu's printfs: printResultsReadable, printResultsCSV)."""
    out = ["[CUDA Bandwidth Test] - Starting...", "Running on...", "", " Device 0: NVIDIA A100-SXM4-40GB",
           f" {mode} Mode", ""]
    sizes = [32000000] if mode == "Quick" else [1024, 2048, 32000000]
    for kind, rate in (("Host to Device", 24.5), ("Device to Host", 26.25), ("Device to Device", 1300.0)):
        for memory in ("PINNED",):
            if csv:
                short = {"Host to Device": "H2D", "Device to Host": "D2H", "Device to Device": "D2D"}[kind]
                for size in sizes:
                    value = rate * (1000 if unit == "MB" else 1)
                    out.append("bandwidthTest-%s-%s, Bandwidth = %.1f %s/s, Time = %.5f s, Size = %u bytes, "
                               "NumDevsUsed = %d" % (short, memory.capitalize(), value, unit, size / (rate * 1e9), size, 1))
                continue
            out += [" %s Bandwidth, %i Device(s)" % (kind, 1), " %s Memory Transfers" % memory,
                    f"   Transfer Size (Bytes)\tBandwidth({unit}/s)"]
            for size in sizes:
                value = rate * (1000 if unit == "MB" else 1)
                out.append("   %u\t\t\t%s%.1f" % (size, "\t" if size < 10000 else "", value))
            out.append("")
    out += ["Result = PASS", ""]
    return "\n".join(out)


@pytest.mark.parametrize("mode, unit, csv", [("Quick", "GB", False), ("Shmoo", "MB", False), ("Range", "GB", True)])
def test_bandwidth_test_rows(mode, unit, csv):
    got = read_log(bandwidth_test_log(mode, unit, csv))
    assert got["format"] == "bandwidthTest"
    rows = {(r["direction"], r["bytes"]): r for r in got["rows"]}
    assert rows[("host_to_device", 32000000)]["Bps"] == pytest.approx(24.5e9)
    assert rows[("device_to_host", 32000000)]["Bps"] == pytest.approx(26.2e9, rel=0.01)  # printed with one decimal
    assert all(r["memory"] == "pinned" for r in got["rows"])
    if not csv:
        assert got["mode"] == mode.lower() and got["devices"] == [{"device": 0, "name": "NVIDIA A100-SXM4-40GB"}]


def test_a_cut_p2p_log_is_an_error():
    text = p2p_log(n=3)
    cut = text[:text.index("Bidirectional P2P=Disabled") - 30]
    with pytest.raises(LogFormatError, match="not square"):
        read_log(cut)


def test_ringlab_import_reads_several_formats_into_one_json_list(tmp_path):
    logs = [tmp_path / "p2p.log", tmp_path / "bw.log"]
    logs[0].write_text(p2p_log(n=2))
    logs[1].write_text(bandwidth_test_log())
    out = tmp_path / "box.json"
    done = subprocess.run([sys.executable, "-m", "ringlab", "import", *map(str, logs), "--json", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    p2p, bw = json.loads(out.read_text())
    assert p2p["format"] == "p2pBandwidthLatencyTest" and p2p["matrices"]["bidirectional_enabled"][1][0] == 410.0
    assert bw["format"] == "bandwidthTest" and len(bw["rows"]) == 3
    assert "# unidirectional_enabled (GB/s), row = source GPU" in done.stdout and "host_to_device" in done.stdout


def nvbandwidth_cases(n=2):
    """Two of nvbandwidth's test cases (testcases_ce.cpp's descriptions), values made up: 55 + j for
    host to GPU j; 300 + 10 * i + j for GPU i reading GPU j, N/A on the diagonal."""
    return [("host_to_device_memcpy_ce", "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)",
             [[55.0 + j for j in range(n)]]),
            ("device_to_device_memcpy_read_ce", "memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)",
             [[None if i == j else 300.0 + 10 * i + j for j in range(n)] for i in range(n)])]


def nvbandwidth_text(n=2):
    """nvbandwidth's text output (output.cpp and inline_common.h's operator<< for the matrices)."""
    out = ["nvbandwidth Version: v0.7", "Built from Git version: ", "",
           "NOTE: The reported results may not reflect the full capabilities of the platform.",
           "Performance can vary with software drivers, hardware clocks, and system topology.", "",
           "CUDA Runtime Version: 12040", "CUDA Driver Version: 12040", "Driver Version: 550.54.15", "", "node1"]
    out += ["Device %d: %s (%08x:%02x:%02x)" % (i, "NVIDIA H100 80GB HBM3", 0, 0x19 + i, 0) for i in range(n)] + [""]
    for name, description, matrix in nvbandwidth_cases(n):
        out += [f"Running {name}.", description, "  " + "".join("%10d" % j for j in range(len(matrix[0])))]
        for i, row in enumerate(matrix):
            out.append("%2d" % i + "".join("%10s" % ("N/A" if v is None else "%.2f" % v) for v in row))
        out += ["", "SUM %s %.2f" % (name, sum(v or 0 for r in matrix for v in r)), ""]
    out += ["Running all_to_host_memcpy_ce.", "Waived: ", ""]
    return "\n".join(out)


def nvbandwidth_json(n=2):
    """nvbandwidth -j (json_output.cpp): values as strings, N/A as "N/A"."""
    cases = [{"name": name, "status": "Passed", "bandwidth_description": description,
              "bandwidth_matrix": [["N/A" if v is None else "%g" % v for v in row] for row in matrix],
              "sum": sum(v or 0 for r in matrix for v in r)} for name, description, matrix in nvbandwidth_cases(n)]
    return json.dumps({"nvbandwidth": {"version": "v0.7", "git_version": "", "CUDA Runtime Version": 12040,
                                       "Driver Version": "550.54.15",
                                       "GPU Device list": ["%d: %s (%08x:%02x:%02x): (node1)" % (
                                           i, "NVIDIA H100 80GB HBM3", 0, 0x19 + i, 0) for i in range(n)],
                                       "testcases": cases}}, indent=3)


@pytest.mark.parametrize("make", [nvbandwidth_text, nvbandwidth_json])
def test_nvbandwidth_text_and_json(make):
    got = read_log(make(3))
    assert got["format"] == "nvbandwidth" and got["version"] == "v0.7" and got["driver"] == "550.54.15"
    assert [d["bus"] for d in got["devices"]] == ["00000000:19:00", "00000000:1a:00", "00000000:1b:00"]
    h2d = got["testcases"]["host_to_device_memcpy_ce"]
    assert h2d["matrix"] == [[55.0, 56.0, 57.0]] and "CPU(row) -> GPU(column)" in h2d["description"]
    d2d = got["testcases"]["device_to_device_memcpy_read_ce"]["matrix"]
    assert d2d[2][1] == 321.0 and d2d[1][1] is None
    if make is nvbandwidth_text:
        assert got["testcases"]["all_to_host_memcpy_ce"]["status"] == "Waived"


def test_imported_nccl_rows_fit_like_ringlab_rows():
    """t = 20 us + K / 100 GB/s on 8 ranks is a ring of 14 steps: alpha = 20/14 us and the ring's
    K/B term 2(n-1)/n K/B gives B = 175 GB/s. The fit must find them from the imported rows."""
    from ringlab.predict.fitting import fit_rows

    text, _ = nccl_log(sizes=tuple(1 << k for k in range(10, 30, 2)))
    got = read_log(text)
    fitted = fit_rows(got["rows"], "ring", got["ranks"])
    assert fitted.alpha == pytest.approx(20e-6 / 14, rel=0.02)
    assert fitted.bandwidth == pytest.approx(175e9, rel=0.02)


def test_published_sweeps_fit_too():
    from ringlab.measure import published
    from ringlab.predict.fitting import fit_rows

    sweep = published.load("A01_nccltests290_h100x8_hgx_1node_allreduce").data
    fitted = fit_rows(sweep["rows"], "ring", sweep["ranks"])
    assert fitted.alpha > 0 and fitted.bandwidth > 1e9


def test_read_folder_finds_the_learners_logs_and_skips_what_it_cannot_read(tmp_path, monkeypatch):
    from ringlab.measure.logs import my_logs_folder, read_folder

    (tmp_path / "allreduce.txt").write_text(nccl_log()[0])
    (tmp_path / "p2p.log").write_text(p2p_log())
    (tmp_path / "notes.md").write_text("what I ran, and when\n")
    (tmp_path / "sub").mkdir()
    monkeypatch.setenv("RINGLAB_LOGS", str(tmp_path))
    assert my_logs_folder() == tmp_path
    found = read_folder()
    assert [log["format"] for log in found] == ["nccl-tests", "p2pBandwidthLatencyTest"]
    assert found[0]["label"] == "your log, allreduce.txt" and found[0]["collective"] == "allreduce"
    assert [log["file"] for log in read_folder(format="p2pBandwidthLatencyTest")] == [str(tmp_path / "p2p.log")]
    assert read_folder(tmp_path / "absent") == []
    with pytest.raises(ValueError, match="is a file, not a folder of logs"):
        read_folder(tmp_path / "notes.md")


def test_read_folder_reads_what_ringlab_import_wrote(tmp_path):
    from ringlab.measure.logs import read_folder

    logs = tmp_path / "logs"
    logs.mkdir()
    (tmp_path / "a.log").write_text(nccl_log()[0])
    (tmp_path / "b.log").write_text(bandwidth_test_log())
    for names, out in (([tmp_path / "a.log"], logs / "one.json"), ([tmp_path / "a.log", tmp_path / "b.log"], logs / "two.json")):
        done = subprocess.run([sys.executable, "-m", "ringlab", "import", *map(str, names), "--json", str(out)],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
    (logs / "other.json").write_text('{"format": "a spreadsheet"}')
    found = read_folder(logs)
    assert [(log["label"], log["format"]) for log in found] == [
        ("your log, one.json", "nccl-tests"), ("your log, two.json, log 1", "nccl-tests"),
        ("your log, two.json, log 2", "bandwidthTest")]
    assert found[0]["rows"] == found[1]["rows"] and found[0]["rows"][-1]["busbw_Bps"] > 0


def run_import(*args, timeout=30):
    return subprocess.run([sys.executable, "-m", "ringlab", "import", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout)


def test_ringlab_import_refuses_what_is_no_log_file_without_reading_it(tmp_path):
    import os

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)  # opening it would wait forever for a writer
    for path, said in ((fifo, "is a FIFO (named pipe), not a log file"), ("/dev/zero", "is a device, not a log file"),
                       (tmp_path, "is a folder, not a log file")):
        done = run_import(path)
        assert done.returncode == 2 and said in done.stderr, done.stderr
    huge = tmp_path / "huge.log"
    with open(huge, "wb") as fh:
        fh.truncate(65 << 20)  # sparse: no disk needed
    done = run_import(huge)
    assert done.returncode == 2 and "holds 65 MiB: more than a tool's log" in done.stderr, done.stderr


def test_two_runs_in_one_file_are_two_results_and_a_cut_row_is_said(tmp_path):
    first, rows = nccl_log(sizes=(8, 1024))
    second, _ = nccl_log(program="all_gather_perf", kind="allgather", sizes=(4096, 8192, 16384))
    cut = second.replace("\n# Out of bounds", "\n        32768          8192     float    none      -1     20.3\n"
                                              "# Out of bounds", 1)
    log = tmp_path / "two.log"
    log.write_text(first + "\n" + cut)
    out = tmp_path / "two.json"
    done = run_import(log, "--json", out)
    assert done.returncode == 0, done.stderr
    data = json.loads(out.read_text())
    assert [d["collective"] for d in data] == ["allreduce", "allgather"]
    assert [len(d["rows"]) for d in data] == [2, 3]
    assert data[1]["left_out"] and "32768" in data[1]["left_out"][0]["text"]
    assert "a result row cut short or garbled, left out" in done.stderr


def test_json_holds_no_nan_or_infinity(tmp_path):
    log, _ = nccl_log(sizes=(8, 1024))
    lines = log.splitlines()
    row = next(i for i, line in enumerate(lines) if line.strip().startswith("1024"))
    fields = lines[row].split()
    fields[5:8] = ["0.00", "inf", "inf"]  # a time that printed as zero: algbw and busbw infinite (printf's "inf")
    lines[row] = "  ".join(fields)
    path = tmp_path / "inf.log"
    path.write_text("\n".join(lines))
    out = tmp_path / "inf.json"
    assert run_import(path, "--json", out).returncode == 0
    text = out.read_text()
    assert "Infinity" not in text and "NaN" not in text
    assert json.loads(text)["rows"][1]["algbw_Bps"] is None


@pytest.mark.parametrize("broken", [
    {"nvbandwidth": {"testcases": [{"name": "x", "bandwidth_matrix": [[None, "1.0"]]}]}},
    {"nvbandwidth": {"testcases": {"name": "x"}}},
    {"nvbandwidth": ["not", "an", "object"]},
    {"nvbandwidth": {"GPU Device list": 3, "testcases": []}},
])
def test_malformed_nvbandwidth_json_is_a_clear_error_and_the_folder_reader_goes_on(broken, tmp_path, monkeypatch):
    from ringlab.measure.logs import read_folder

    with pytest.raises(LogFormatError, match="nvbandwidth"):
        read_log(json.dumps(broken))
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    (tmp_path / "good.log").write_text(nccl_log()[0])
    with pytest.warns(UserWarning, match="broken.json: .*nvbandwidth.*left out"):
        found = read_folder(tmp_path)
    assert [f["file"].rsplit("/", 1)[1] for f in found] == ["good.log"]
