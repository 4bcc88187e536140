import pytest

from keras_transformer import TransformerSchedule


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
