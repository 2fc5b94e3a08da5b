"""Lab 03's measured lessons in words, computed from the runs, both ways (ringlab.lessons.lab03_allreduce)."""
import ringlab as rl
from ringlab.lessons.lab03_allreduce import (MACHINE, OVER_RANKS, RANKS, links_of, scaling_lesson, scaling_rows,
                                             sweep_lesson)
from ringlab.schedule import bus_factor

SIZES = [1 << k for k in range(16, 25, 2)]


def rows_from(seconds: dict, n: int = 4, **more) -> list[dict]:
    """Bench-like rows from {algorithm: {bytes: seconds}}."""
    return [{"algorithm": name, "bytes": k, "time_s": t, "algbw_Bps": k / t, "busbw_Bps": k / t * bus_factor("allreduce", n),
             **more} for name, times in seconds.items() for k, t in times.items()]


def predicted(name: str, n: int = 4) -> dict:
    topology, scale = rl.topology.from_spec(MACHINE, n)
    return {k: rl.predict(rl.build(f"allreduce.{name}", n), k, topology, itemsize=4).seconds * scale for k in SIZES}


def emulated(seconds: dict) -> dict:
    """A bench result on the lab's emulated machine, its times here (the machine's times x its scale)."""
    return {"ranks": 4, "rows": rows_from(seconds, emulated=True),
            "emulation": {"spec": MACHINE, "label": f"emulated {MACHINE}", "scale": rl.topology.from_spec(MACHINE)[1]}}


RAW = {"ranks": 4, "rows": rows_from({"ring": {k: 1e-3 + k / 1e9 for k in SIZES},
                                      "naive": {k: 5e-4 + k / 5e8 for k in SIZES},
                                      "mpi": {k: 4e-4 + k / 8e8 for k in SIZES}})}


def test_links_that_behave_as_the_model_says_give_the_lessons_conclusions():
    finding = sweep_lesson(RAW, emulated({"ring": predicted("ring"), "naive": predicted("naive")}), cores=2)
    assert finding.conclusions == ("the ring stays ahead of naive at large sizes on the emulated machine",
                                   "the ring's advantage matches the prediction on the emulated machine",
                                   "the fit recovers the emulated links' bandwidth")
    assert "On this machine (4 ranks on 2 cores):" in finding.text and "the cost model predicts" in finding.text
    # on these links naive pays as many latencies as the ring and carries more: the ring is ahead from the smallest size
    assert "the ring is ahead of naive at every size measured; the cost model puts it ahead at every size too (on " \
           "these links naive's root pays" in finding.text
    assert finding.observations == ("the ring overtakes naive on this machine",)


def test_the_model_puts_the_ring_ahead_only_from_where_it_stays_ahead(monkeypatch):
    """A ring the model puts ahead at the smallest size, behind at the next and ahead again from there is 'ahead
    from' the third size up, not from the first."""
    import types

    import ringlab.lessons.lab03_allreduce as lesson
    from ringlab.measure.units import format_bytes

    real = lesson.predict
    behind = SIZES[1]

    def predict(schedule, nbytes, *args, **kwargs):
        got = real(schedule, nbytes, *args, **kwargs)
        if nbytes == behind and "ring" in schedule.name:
            return types.SimpleNamespace(seconds=got.seconds * 100)  # the lesson reads its seconds only
        return got

    monkeypatch.setattr(lesson, "predict", predict)
    finding = sweep_lesson(RAW, emulated({"ring": predicted("ring"), "naive": predicted("naive")}), cores=2)
    assert f"the cost model puts it ahead from {format_bytes(SIZES[2])} up." in finding.text


def test_a_ring_slowed_by_something_besides_its_links_is_said_so():
    slow = {k: t * 3 for k, t in predicted("ring").items()}  # three times the links' time at every size
    finding = sweep_lesson(RAW, emulated({"ring": slow, "naive": predicted("naive")}), cores=2)
    assert "the ring's advantage does not match the prediction on the emulated machine" in finding.conclusions
    assert "something besides the links" in finding.text


def test_busbw_over_ranks_is_flat_when_the_links_set_the_pace_and_said_not_when_it_is_not():
    alpha, bandwidth = links_of(OVER_RANKS, 16)
    exact = [dict(r, compute="model", wall_time_s=0.01 * r["ranks"])
             for r in scaling_rows(alpha, bandwidth, ranks=RANKS, sizes=(4 << 20,))]
    finding = scaling_lesson(exact)
    assert finding.conclusions == ("busbw stays flat across ranks on the emulated machine", "algbw falls as ranks are added")
    assert "busbw stays near the link's 200 MB/s" in finding.text and "from 2 to 16 ranks" in finding.text
    assert "compute='model': this CPU's work never counts" in finding.text
    assert "This machine took 20 ms, 40 ms, 80 ms, 160 ms of wall time a call at 2, 4, 8, 16 ranks" in finding.text
    sagging = [dict(r, busbw_Bps=r["busbw_Bps"] / (1 + r["ranks"] / 4)) for r in exact]
    finding = scaling_lesson(sagging)
    assert finding.conclusions[0] == "busbw does not stay flat across ranks on the emulated machine"
    assert "more than the 5% a flat line allows" in finding.text
