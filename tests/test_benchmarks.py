"""The benchmark scripts run and check their own results (no speed is asserted: machines are noisy)."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_allreduce_benchmark_runs_and_compares_with_mpi(tmp_path):
    out = tmp_path / "rows.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "allreduce_vs_mpi.py"), "-n", "2",
                           "-b", "4K", "-e", "16K", "--iters", "2", "--warmup", "1", "--json", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    assert {r["algorithm"] for r in rows} == {"mpi", "ring", "naive", "ps", "rhd"}
    assert {r["bytes"] for r in rows} == {4096, 16384}
    assert all(r["time_s"] > 0 and r["busbw_Bps"] > 0 for r in rows)
    assert all(abs(r["ratio_to_mpi"] - 1) < 1e-12 for r in rows if r["algorithm"] == "mpi")
    assert all(r["wrong"] == 0 for r in rows)  # every result checked against MPI's Allreduce
    assert "busbw" in done.stdout and "ratio to MPI" in done.stdout and "ring" in done.stdout
