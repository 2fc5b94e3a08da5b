import numpy as np
import pytest
from hypothesis import given, strategies as st

import ringlab as rl

from conftest import all_schedules, variants

DTYPES = [np.float16, np.float32, np.float64, np.int32, np.int64]
LARGE_PRIME = 10007


def make_inputs(nranks, count, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if np.issubdtype(dtype, np.integer):
        return [rng.integers(-1000, 1000, size=count).astype(dtype) for _ in range(nranks)]
    return [rng.uniform(-1, 1, size=count).astype(dtype) for _ in range(nranks)]


def assert_correct(schedule, inputs, outputs):
    """Every chunk the collective defines equals numpy's float64 (or exact integer) sum of the
    inputs whose ranks it must hold; floats within n * eps(dtype) * sum|x|."""
    coll = schedule.collective
    dtype = inputs[0].dtype
    exact = np.issubdtype(dtype, np.integer)
    wide = [x.reshape(-1).astype(np.int64 if exact else np.float64) for x in inputs]
    bounds = rl.chunk_bounds(wide[0].size, coll.nchunks)
    for rank, out in enumerate(outputs):
        assert out.dtype == dtype and out.shape == inputs[0].shape
        flat = out.reshape(-1)
        for chunk in range(coll.nchunks):
            need = coll.end(rank, chunk)
            if need is None:
                continue
            part = slice(bounds[chunk], bounds[chunk + 1])
            want = sum(wide[r][part] for r in sorted(need))
            got = flat[part]
            if exact:
                assert np.array_equal(got.astype(np.int64), want), (rank, chunk)
            else:
                scale = sum(np.abs(wide[r][part]) for r in need)
                tolerance = coll.nranks * np.finfo(dtype).eps * scale
                assert np.all(np.abs(got.astype(np.float64) - want) <= tolerance), (rank, chunk)


@pytest.mark.parametrize("name", sorted(rl.ALGORITHMS))
@pytest.mark.parametrize("nranks", [1, 2, 3, 5, 7, 16])
def test_every_size_and_dtype(name, nranks):
    """Element counts 0, 1, n-1, n, n+1 and a large prime; five dtypes; root n-1."""
    schedule = rl.build(name, nranks, **variants(name, nranks, roots=[nranks - 1])[-1])
    for count in sorted({0, 1, nranks - 1, nranks, nranks + 1, LARGE_PRIME}):
        for dtype in DTYPES:
            inputs = make_inputs(nranks, count, dtype, seed=count)
            assert_correct(schedule, inputs, rl.simulate(schedule, inputs))


@pytest.mark.parametrize("name", sorted(rl.ALGORITHMS))
def test_every_rank_count_and_root(name):
    for algo, nranks, opts in all_schedules():
        if algo == name:
            schedule = rl.build(name, nranks, **opts)
            inputs = make_inputs(nranks, 2 * nranks + 3, np.int64, seed=nranks)
            assert_correct(schedule, inputs, rl.simulate(schedule, inputs))


@given(data=st.data())
def test_property_random_algorithm_size_dtype(data):
    name = data.draw(st.sampled_from(sorted(rl.ALGORITHMS)), label="algorithm")
    nranks = data.draw(st.integers(1, 16), label="nranks")
    opts = data.draw(st.sampled_from(variants(name, nranks)), label="options")
    count = data.draw(st.sampled_from([0, 1, nranks - 1, nranks, nranks + 1, LARGE_PRIME])
                      | st.integers(0, 200), label="count")
    dtype = data.draw(st.sampled_from(DTYPES), label="dtype")
    shape = (count,) if count % 2 else (2, count // 2)  # any shape; chunks cut the flattened buffer
    inputs = [x.reshape(shape) for x in make_inputs(nranks, count, dtype, seed=count)]
    schedule = rl.build(name, nranks, **opts)
    assert_correct(schedule, inputs, rl.simulate(schedule, inputs))


def test_allreduce_equals_numpy_sum_and_leaves_inputs_alone():
    inputs = [np.arange(11, dtype=np.int64) * (r + 1) for r in range(5)]
    before = [x.copy() for x in inputs]
    result = rl.simulate(rl.build("allreduce.ring", 5), inputs)
    assert isinstance(result, rl.Simulation) and len(result) == 5
    for out in result:
        assert out.tolist() == (np.arange(11) * 15).tolist()
    assert all(np.array_equal(a, b) for a, b in zip(inputs, before))


def test_provenance_step_by_step():
    result = rl.simulate(rl.build("allreduce.ring", 3), [np.ones(3)] * 3)
    assert len(result.provenance) == 5
    assert result.provenance[0][1] == (frozenset({1}),) * 3
    assert result.provenance[1][1][0] == frozenset({0, 1})  # step 0: rank 0 sent chunk 0 to rank 1
    assert result.provenance[-1][2] == (frozenset({0, 1, 2}),) * 3


@pytest.mark.parametrize("inputs, message", [
    ([np.zeros(3)] * 2, "runs on 3 ranks, but got 2 input arrays"),
    ([np.zeros(3), np.zeros(4), np.zeros(3)], r"inputs differ in shape: rank 0 has \(3,\), rank 1 has \(4,\)"),
    ([np.zeros(3), np.zeros(3), np.zeros(3, np.float32)], "inputs differ in dtype: rank 0 has float64, rank 2 has float32"),
    ([np.array(["a"])] * 3, "inputs must be numeric arrays"),
])
def test_bad_inputs(inputs, message):
    with pytest.raises(ValueError, match=message):
        rl.simulate(rl.build("allreduce.ring", 3), inputs)


def where(call):
    with pytest.raises(rl.ScheduleError) as info:
        call()
    return info.value.step, info.value.rank, info.value.chunk, str(info.value)


def test_sending_data_the_sender_does_not_hold():
    # a chain broadcast with its two steps swapped: rank 1 forwards before it has received
    wrong = rl.make_schedule("broadcast", 3, 1, [[(1, 2, 0, "copy")], [(0, 1, 0, "copy")]], root=0)
    step, rank, chunk, message = where(lambda: rl.check(wrong))
    assert (step, rank, chunk) == (0, 1, 0)
    assert "step 0: rank 1 sends chunk 0 to rank 2, but rank 1 holds no data for chunk 0" in message


def test_counting_a_contribution_twice():
    # direct reduce to rank 0 with its only step repeated
    step0 = [(1, 0, 0, "reduce"), (2, 0, 0, "reduce")]
    wrong = rl.make_schedule("reduce", 3, 1, [step0, step0], root=0)
    step, rank, chunk, message = where(lambda: rl.simulate(wrong, [np.ones(4)] * 3))
    assert (step, rank, chunk) == (1, 0, 0)
    assert "step 1: rank 1 adds r1's data to chunk 0 on rank 0 a second time" in message


def test_a_ring_with_the_wrong_reduce_scatter_index_is_caught():
    # the classic slip: rank j sends chunk (j-i-1) instead of (j-i) while keeping the
    # allgather of FACTS, so the allgather forwards chunks that are not complete yet
    n = 4
    j = np.arange(n)
    steps = [rl.Step.columns(j, (j + 1) % n, (j - i - 1) % n, "reduce") for i in range(n - 1)]
    steps += list(rl.build("allreduce.ring", n).steps[n - 1:])
    wrong = rl.make_schedule("allreduce", n, n, steps)
    step, rank, chunk, message = where(lambda: rl.check(wrong))
    # after the wrong reduce-scatter rank j holds chunk j complete, not j+1. The allgather's
    # first step has rank 3 send chunk 0, then holding r1+r2+r3, over rank 0's complete one,
    # and nothing later in the allgather writes chunk 0 on rank 0 again.
    assert (step, rank, chunk) == (None, 0, 0)
    assert "rank 0 holds r1+r2+r3 in chunk 0, but allreduce needs r0+r1+r2+r3 there" in message


def test_missing_last_step_fails_the_end_condition():
    ring = rl.build("allreduce.ring", 4)
    short = rl.make_schedule("allreduce", 4, 4, ring.steps[:-1])
    step, rank, chunk, message = where(lambda: rl.check(short))
    assert (step, rank, chunk) == (None, 0, 2)
    assert message == ("after the last step (step 4) rank 0 holds r0+r2+r3 in chunk 2, "
                       "but allreduce needs r0+r1+r2+r3 there")


def test_two_writes_to_one_chunk_in_one_step():
    wrong = rl.make_schedule("broadcast", 3, 1, [[(0, 1, 0, "copy"), (0, 2, 0, "copy")],
                                                 [(0, 2, 0, "copy"), (1, 2, 0, "copy")]], root=0)
    step, rank, chunk, message = where(lambda: rl.check(wrong))
    assert (step, rank, chunk) == (1, 2, 0)
    assert "receives chunk 0 twice in one step" in message


def test_adding_into_a_rank_without_data():
    wrong = rl.make_schedule("broadcast", 2, 1, [[(0, 1, 0, "reduce")]], root=0)
    step, rank, chunk, message = where(lambda: rl.check(wrong))
    assert (step, rank, chunk) == (0, 1, 0)
    assert "rank 1 holds no data for chunk 0 to add it to (use 'copy')" in message


def test_schedule_error_is_a_value_error():
    assert issubclass(rl.ScheduleError, ValueError)


def test_provenance_str():
    assert rl.provenance_str(frozenset({0, 1, 2})) == "r0+r1+r2"
    assert rl.provenance_str(frozenset()) == "-"
    assert rl.provenance_str(frozenset(range(8)) | {10}) == "r0..r7+r10"
