import dataclasses

import numpy as np
import pytest
from hypothesis import given, strategies as st

import ringlab as rl
from ringlab.schedule import Collective, Step, Transfer


@given(count=st.integers(0, 500), nchunks=st.integers(1, 40))
def test_chunk_bounds_follow_array_split(count, nchunks):
    bounds = rl.chunk_bounds(count, nchunks)
    pieces = np.array_split(np.arange(count), nchunks)
    assert len(bounds) == nchunks + 1
    assert [len(p) for p in pieces] == list(np.diff(bounds))
    for c, piece in enumerate(pieces):
        assert np.array_equal(np.arange(count)[bounds[c]:bounds[c + 1]], piece)


def test_fewer_elements_than_chunks_leaves_empty_chunks():
    assert list(np.diff(rl.chunk_bounds(2, 5))) == [1, 1, 0, 0, 0]
    assert list(rl.chunk_bounds(0, 3)) == [0, 0, 0, 0]


@pytest.mark.parametrize("count, nchunks", [(-1, 2), (4, 0)])
def test_chunk_bounds_rejects_bad_arguments(count, nchunks):
    with pytest.raises(ValueError, match="count >= 0 and nchunks >= 1"):
        rl.chunk_bounds(count, nchunks)


def test_step_is_immutable_and_yields_transfers():
    step = Step.of([(0, 1, 2, "reduce"), (1, 0, 3, "copy")], label="x")
    assert list(step) == [Transfer(0, 1, 2, "reduce"), Transfer(1, 0, 3, "copy")]
    with pytest.raises(dataclasses.FrozenInstanceError):
        step.label = "y"
    with pytest.raises(ValueError):
        step.src[0] = 5  # read-only array
    assert Step.columns([0, 1], 2, 0, "copy") == Step.of([(0, 2, 0, "copy"), (1, 2, 0, "copy")])
    assert Step.columns([0, 1], 2, 0, "copy") != Step.of([(0, 2, 0, "copy"), (1, 2, 0, "reduce")])


def test_schedule_is_immutable():
    ring = rl.build("allreduce.ring", 3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ring.steps = ()
    with pytest.raises(TypeError):
        ring.options["x"] = 1


@pytest.mark.parametrize("steps, message", [
    ([[(0, 3, 0, "reduce")]], "names rank 3, but the schedule has ranks 0..2"),
    ([[(-1, 1, 0, "reduce")]], "names rank -1"),
    ([[(0, 1, 2, "reduce")]], "names chunk 2, but the schedule has chunks 0..1"),
    ([[(1, 1, 0, "copy")]], "rank 1 sends chunk 0 to itself"),
    ([[(0, 1, 0, "add")]], "op must be 'reduce' or 'copy', not 'add'"),
])
def test_malformed_schedule_is_rejected_when_built(steps, message):
    with pytest.raises(ValueError, match=message):
        rl.make_schedule("allreduce", 3, 2, steps)


@pytest.mark.parametrize("kwargs, message", [
    (dict(kind="gossip", nranks=2, nchunks=1), "unknown collective 'gossip'"),
    (dict(kind="reduce", nranks=2, nchunks=1, root=2), "root must be a rank in 0..1"),
    (dict(kind="allreduce", nranks=2, nchunks=1, root=0), "allreduce has no root"),
    (dict(kind="allgather", nranks=2, nchunks=3), "one owner per chunk"),
    (dict(kind="allgather", nranks=2, nchunks=2, owners=(0, 5)), "chunk owners must be ranks 0..1"),
    (dict(kind="allreduce", nranks=0, nchunks=1), "nranks must be >= 1"),
])
def test_collective_rejects_bad_conditions(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Collective(**kwargs)


def test_collective_states_start_and_end():
    bcast = Collective("broadcast", 3, 1, root=1)
    assert bcast.start_table() == ((frozenset(),), (frozenset({1}),), (frozenset(),))
    assert bcast.end_table() == ((frozenset({1}),),) * 3
    red = Collective("reduce", 3, 2, root=2)
    assert red.end(0, 1) is None and red.end(2, 1) == frozenset({0, 1, 2})
    rs = Collective("reduce_scatter", 2, 2)
    assert rs.end(1, 1) == frozenset({0, 1}) and rs.end(1, 0) is None
    ag = Collective("allgather", 2, 2, owners=(1, 0))
    assert ag.start(1, 0) == frozenset({1}) and ag.start(0, 0) == frozenset()
    assert ag.end(0, 0) == frozenset({1})
