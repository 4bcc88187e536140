import keras
import pytest

from keras_transformer import TransformerSchedule
from keras_transformer.training.schedules import LinearCooldown


@pytest.mark.parametrize("iteration", [0, 1, 99, 3999, 4000, 20000])
def test_matches_the_paper_formula(iteration):
    schedule = TransformerSchedule(d_model=512, warmup_steps=4000)
    step = iteration + 1
    expected = 512**-0.5 * min(step**-0.5, step * 4000**-1.5)
    assert float(schedule(iteration)) == pytest.approx(expected, rel=1e-5)


def test_peaks_at_the_end_of_warmup_and_scales():
    schedule = TransformerSchedule(d_model=128, warmup_steps=100, scale=2.0)
    rates = [float(schedule(i)) for i in range(300)]
    assert max(range(300), key=rates.__getitem__) == 99
    assert rates[99] == pytest.approx(2.0 * 128**-0.5 * 100**-0.5, rel=1e-5)


def test_config_round_trip():
    schedule = TransformerSchedule(d_model=64, warmup_steps=10, scale=3.0)
    clone = TransformerSchedule.from_config(schedule.get_config())
    assert clone.get_config() == schedule.get_config()


def cooled(end=None, length=None):
    return LinearCooldown(TransformerSchedule(d_model=64, warmup_steps=10), end, length)


def test_an_unplanned_cooldown_is_the_schedule_itself():
    schedule = cooled()
    assert schedule.end is None and schedule.start is None
    for iteration in (0, 9, 500, 10**7):
        assert float(schedule(iteration)) == float(schedule.schedule(iteration))


@pytest.mark.parametrize("iteration, factor", [
    (0, 1.0), (75, 1.0), (80, 1.0), (90, 0.5), (99, 1 / 20), (100, 0.0), (150, 0.0),
])
def test_cooldown_falls_linearly_to_zero_at_its_end(iteration, factor):
    schedule = cooled(end=100, length=20)
    assert (schedule.start, schedule.end) == (80, 100)
    expected = factor * float(schedule.schedule(iteration))
    assert float(schedule(iteration)) == pytest.approx(expected, rel=1e-6, abs=1e-12)


def test_a_cooldown_can_be_planned_again_and_cleared():
    schedule = cooled(end=100, length=20)
    schedule.plan(40, 10)
    assert (schedule.start, schedule.end) == (30, 40)
    assert float(schedule(35)) == pytest.approx(0.5 * float(schedule.schedule(35)), rel=1e-6)
    schedule.plan(None)
    assert schedule.end is None
    assert float(schedule(35)) == float(schedule.schedule(35))


@pytest.mark.parametrize("end, length", [(10, 0), (10, 11), (10, None), (10, 2.5)])
def test_a_cooldown_needs_a_length_within_the_run(end, length):
    with pytest.raises(ValueError, match="0 < length <= end"):
        cooled(end, length)


@pytest.mark.parametrize("end, length", [(None, None), (100, 20)])
def test_cooldown_config_round_trip(end, length):
    schedule = cooled(end, length)
    clone = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(schedule))
    assert isinstance(clone, LinearCooldown)
    assert clone.get_config() == schedule.get_config()
    assert (clone.end, clone.start) == (schedule.end, schedule.start)
    for iteration in (0, 85, 99):
        assert float(clone(iteration)) == float(schedule(iteration))
