"""The stand-in bites: every synchronisation the GPU code relies on, removed one at a time, makes
a gpusim run fail.

The sites are found by reading the source (calls named ``synchronize``, ``wait_event`` or
``wait_for_gpu`` in the GPU code, but ``emulate.synchronize``, which sets emulated ranks' virtual
clocks alike and waits for no GPU), so a new one is covered without editing this file. For each, a
copy of the package with that one call replaced by ``None`` runs the quick gpusim checks of its
module; some check must fail. A site whose removal nothing notices is either not needed (delete
it) or not tested (write the test).
"""
from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

from gpusim_support import SCRIPTS, run_gpusim, run_python

pytestmark = pytest.mark.gpusim

PACKAGE = Path(__file__).resolve().parents[1] / "ringlab"
SYNC_CALLS = {"synchronize", "wait_event", "wait_for_gpu"}
COLLECTIVES = [(2, ["gpusim_collectives.py", t, "quick"], {"cuda_aware": t == "cuda-aware"})
               for t in ("cuda-aware", "host", "ipc")]
TRACE = [(2, ["gpusim_trace.py", t], {"cuda_aware": t == "cuda-aware"}) for t in ("cuda-aware", "host", "ipc")]
NODES = [(4, ["gpusim_collectives.py", "ipc", "quick"], {"RINGLAB_RANKS_PER_NODE": "2"})]  # ipc inside, host between
WINDOWS = [(3, ["gpusim_collectives.py", "cuda-aware", "windows"], {"cuda_aware": True})]  # receives a window at a time
OPTIMIZER = [(2, ["gpusim_optimizer.py", "host", o], {}) for o in ("overlap", "no-overlap")]
CLOCKS = [(1, ["gpusim_timing.py"], {"machine": "rtx2080ti-2"}), (2, ["gpusim_timing_ranks.py"], {})]
CHECKS = {  # which quick runs exercise each file's synchronisations
    "mpi/run.py": COLLECTIVES + NODES + WINDOWS,
    "mpi/collectives.py": COLLECTIVES + [(2, ["gpusim_alltoallv.py"], {})],  # rl.alltoallv's staging
    "mpi/plan.py": TRACE,
    "mpi/devices.py": COLLECTIVES + TRACE,
    "train/buckets.py": OPTIMIZER,
    "measure/timing.py": CLOCKS,
    "measure/bandwidth.py": CLOCKS,
}


def sites() -> list[tuple[str, int, int, int, int]]:
    """(file, line, column, end line, end column) of every synchronisation call in the GPU code."""
    found = []
    for relative in sorted(CHECKS):
        tree = ast.parse((PACKAGE / relative).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "attr", getattr(node.func, "id", None))
                owner = getattr(getattr(node.func, "value", None), "id", None)
                if name in SYNC_CALLS and owner != "emulate":  # emulate.synchronize: the virtual clocks' barrier
                    found.append((relative, node.lineno, node.col_offset, node.end_lineno, node.end_col_offset))
    return found


def test_the_scan_finds_the_synchronisations_we_know():
    found = {(f, line) for f, line, *_ in sites()}
    assert {f for f, _ in found} == set(CHECKS), found  # every file has some
    assert len(found) >= 12, found


def mutate(root: Path, site) -> str:
    """Copy the package under ``root`` with the call at ``site`` replaced by None; return the old call."""
    relative, line, col, end_line, end_col = site
    copy = root / "ringlab"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    lines = (copy / relative).read_text().splitlines(keepends=True)
    assert line == end_line, f"{relative}:{line}: a call over several lines; keep synchronisations on one line"
    old = lines[line - 1][col:end_col]
    lines[line - 1] = lines[line - 1][:col] + "None" + lines[line - 1][end_col:]
    (copy / relative).write_text("".join(lines))
    return old


@pytest.mark.timeout(600)
@pytest.mark.parametrize("site", sites(), ids=lambda s: f"{s[0]}:{s[1]}")
def test_removing_a_synchronisation_breaks_a_gpusim_check(site, tmp_path):
    old = mutate(tmp_path, site)
    loaded = run_python(["-c", "import ringlab; print(ringlab.__file__)"], ringlab_from=str(tmp_path))
    assert str(tmp_path) in loaded.stdout, loaded.stdout + loaded.stderr  # the mutant, not this checkout
    outcomes = []
    for nranks, (script, *args), options in CHECKS[site[0]]:
        done = run_gpusim(nranks, [str(SCRIPTS / script), *args], timeout=120, ringlab_from=str(tmp_path), **options)
        outcomes.append(f"{script} {' '.join(args)}: exit {done.returncode}")
        if done.returncode != 0:
            return
    pytest.fail(f"{site[0]}:{site[1]}: without `{old}` every check still passes ({'; '.join(outcomes)})")
