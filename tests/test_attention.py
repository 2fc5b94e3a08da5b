"""ringlab.train.attention: ring attention on 2 and 3 real ranks equals full attention (causal or not, overlapped
or not, several heads), and the online softmax it folds blocks with is exact."""
import json
from pathlib import Path

import numpy as np
import pytest

from ringlab.cluster.launch import run_mpi
from ringlab.train.attention import attention, merge

SCRIPT = Path(__file__).parent / "mpi" / "ring_attention.py"


@pytest.mark.parametrize("nranks", [2, 3])
def test_ring_attention_equals_full_attention(nranks):
    done = run_mpi(nranks, [str(SCRIPT)], timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == 4
    for row in rows:
        assert row["difference"] < 1e-9, row
    k_and_v = 2 * 5 * 2 * 3 * 8  # one rank's block: 2 heads x 5 tokens x (3 + 3) values of 8 bytes
    assert rows[0]["sent"] == (nranks - 1) * k_and_v  # n-1 blocks passed on, as a ring allgather does


def test_merging_blocks_one_at_a_time_is_the_softmax_of_them_all():
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((4, 3)), rng.standard_normal((9, 3)), rng.standard_normal((9, 2))
    m, l, o = np.full(4, -np.inf), np.zeros(4), np.zeros((4, 2))
    for block in (slice(0, 2), slice(2, 7), slice(7, 9)):
        m, l, o = merge(m, l, o, q @ k[block].T / np.sqrt(3), v[block])
    assert np.allclose(o / l[:, None], attention(q, k, v), rtol=1e-12, atol=0)
