import os
import re
import subprocess
import sys

import pytest

import ringlab as rl
from ringlab.cli import main


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "ringlab", *args], capture_output=True, text=True, timeout=120)


def test_demo_prints_the_ring_with_the_textbook_chunk_indices():
    done = run_cli("demo", "--algorithm", "allreduce.ring", "-n", "4")
    assert done.returncode == 0, done.stderr
    blocks = done.stdout.split("\nStep ")[1:]
    assert len(blocks) == 6
    for index, block in enumerate(blocks):
        moves = re.findall(r"rank +(\d) -> rank +(\d) +chunk (\d)", block)
        assert len(moves) == 4
        i, phase = (index, "reduce-scatter") if index < 3 else (index - 3, "allgather")
        assert block.startswith(f"{index} ({phase}, i={i})")
        for src, dst, chunk in moves:
            j = int(src)
            want = (j - i) % 4 if phase == "reduce-scatter" else (j - i + 1) % 4
            assert (int(dst), int(chunk)) == ((j + 1) % 4, want)
    # what each rank holds after step 0 and at the end, as provenance
    assert re.search(r"rank  1  \*r0\+r1 ", blocks[0])
    final = blocks[-1].split("Afterwards:")[1]
    assert final.count("r0+r1+r2+r3") == 16
    assert "Checked: the end state is what allreduce promises." in done.stdout
    assert re.search(r"^ +0 +1\.5 MiB +1\.5 MiB +1\.500 +1\.500$", done.stdout, flags=re.M)


@pytest.mark.parametrize("name", sorted(rl.ALGORITHMS))
def test_demo_runs_every_algorithm(name, capsys):
    assert main(["demo", "-a", name, "-n", "5", "-b", "4K"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{name} (") and "Traffic for a buffer of K = 4 KiB" in out


def test_demo_passes_the_nccl_options_on(capsys):
    assert main(["demo", "-a", "allreduce.hierarchical", "-n", "4", "--local", "2"]) == 0
    assert capsys.readouterr().out.startswith("allreduce.hierarchical (")
    assert main(["demo", "-a", "allreduce.rings", "-n", "3", "--rings", "3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("allreduce.rings (") and "rings=3" in out


def test_help_lists_every_algorithm():
    done = run_cli("demo", "--help")
    assert done.returncode == 0
    for name in rl.ALGORITHMS:
        assert name in done.stdout


@pytest.mark.parametrize("args, message", [
    (["demo", "-a", "allreduce.rnig"], "did you mean 'allreduce.ring'"),
    (["demo", "-a", "reduce.tree", "--root", "9"], "root must be a rank in 0..3, got 9"),
    (["demo", "-n", "0"], "nranks must be >= 1, got 0"),
    (["demo", "-a", "allreduce.ps", "--servers", "5"], "servers must be in 1..4"),
    (["demo", "-b", "lots"], "cannot read 'lots' as a size"),
    (["demo", "-a", "allreduce.hierarchical", "--local", "9"], "local (ranks per node) must be in 1..4"),
    (["demo", "-a", "allreduce.ring", "--rings", "2"], "allreduce.ring does not take option 'rings'"),
])
def test_bad_arguments_exit_2_with_a_message(args, message):
    done = run_cli(*args)
    assert done.returncode == 2
    assert message in done.stderr


def test_installed_entry_point():
    exe = os.path.join(os.path.dirname(sys.executable), "ringlab")
    if not os.path.exists(exe):
        pytest.skip("ringlab is not installed as a command in this environment")
    done = subprocess.run([exe, "demo", "-a", "broadcast.tree", "-n", "3"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "broadcast.tree" in done.stdout


def test_predict_table_over_every_preset():
    done = run_cli("predict", "-a", "allreduce.ring", "-b", "64M")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("# predicted by the cost model (not measured)")
    for name in rl.topology.preset_names():
        assert re.search(rf"^  {re.escape(name)} +\d+ allreduce.ring +[\d.]+ +[\d.]+  \S", done.stdout, flags=re.M)


def test_predict_steps_crossover_and_rings():
    steps = run_cli("predict", "-t", "dgx1-v100", "-a", "allreduce.ring", "--steps", "-b", "8M").stdout
    assert len(re.findall(r"^ +\d+ +[\d.]+ +[\d.]+ +[\d.]+  gpu", steps, flags=re.M)) == 14
    cross = run_cli("predict", "-t", "dgx1-v100", "--crossover", "allreduce.tree,allreduce.ring").stdout
    assert re.search(r"dgx1-v100 +allreduce.ring beats allreduce.tree: from [\d.]+ KiB up", cross)
    rings = run_cli("predict", "-t", "dgx1-p100", "--rings").stdout
    assert "plain 0..n-1 is 2.00x slower" in rings


def test_predict_with_nccls_protocols():
    done = run_cli("predict", "-t", "hgx-h100-8", "-a", "allreduce.ring", "-b", "4K", "--protocol", "auto")
    assert done.returncode == 0, done.stderr
    assert "NCCL's auto protocol costs" in done.stdout
    assert re.search(r"^  hgx-h100-8 +8 allreduce.ring +[\d.]+ +[\d.]+  LL +gpu", done.stdout, flags=re.M)
    steps = run_cli("predict", "-t", "hgx-h100-8", "-a", "allreduce.ring", "--steps", "--protocol", "Simple").stdout
    assert "(Simple: 8.4 us per call included)" in steps
    assert run_cli("predict", "--protocol", "fast").returncode == 2


def test_predict_unknown_preset():
    done = run_cli("predict", "-t", "dgx9")
    assert done.returncode == 2 and "unknown topology preset 'dgx9'" in done.stderr
