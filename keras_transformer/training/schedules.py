"""The learning-rate schedule of section 5.3, and a linear cooldown at the end of a run."""

from __future__ import annotations

import keras
from keras import ops

# `LinearCooldown.end` before a cooldown is planned: past any run's last step.
_NO_END = 2.0**62


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """lr = scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5).

    Linear warm-up for `warmup_steps`, then decay with the inverse square root of the step. Steps
    count from 1 (the optimizer's iteration 0 is step 1).

    Args:
        d_model: model width.
        warmup_steps: steps of linear warm-up (4000 in the paper).
        scale: multiplier on the whole schedule (1.0 in the paper; small models on few steps
            like larger values).
    """

    def __init__(self, d_model: int, warmup_steps: int = 4000, scale: float = 1.0):
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.scale = scale

    def __call__(self, step):
        step = ops.cast(step, "float32") + 1.0
        warmup = ops.cast(self.warmup_steps, "float32")
        rate = ops.minimum(ops.rsqrt(step), step * warmup**-1.5)
        return self.scale * self.d_model**-0.5 * rate

    def get_config(self):
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps, "scale": self.scale}


@keras.saving.register_keras_serializable(package="keras_transformer")
class LinearCooldown(keras.optimizers.schedules.LearningRateSchedule):
    """`schedule` times a factor that falls linearly to zero over the run's last `length` steps.

    factor(i) = clip((end - i) / length, 0, 1) at optimizer iteration i (0-based): 1 up to
    iteration `end - length`, 1 / length at the last update (iteration `end - 1`), 0 from `end`
    on. A time-budgeted run learns when it will end only while it trains, so `end` and `length`
    are variables that `plan` sets (the `Cooldown` callback does); until then the schedule is
    `schedule` unchanged.

    Args:
        schedule: the schedule to cool down (`TransformerSchedule`).
        end: the iteration at which the rate reaches zero (the run's total steps), or None
            (not planned yet).
        length: steps of the cooldown (with `end`).
    """

    def __init__(self, schedule: keras.optimizers.schedules.LearningRateSchedule,
                 end: int | None = None, length: int | None = None):
        self.schedule = schedule
        self._end = keras.Variable(_NO_END, dtype="float32", trainable=False,
                                   name="cooldown_end")
        self._length = keras.Variable(1.0, dtype="float32", trainable=False,
                                      name="cooldown_length")
        if end is not None:
            self.plan(end, length)

    def plan(self, end: int | None, length: int | None = None) -> None:
        """Cools down over iterations `end - length` to `end`; `end` None: no cooldown."""
        if end is None:
            self._end.assign(_NO_END)
            self._length.assign(1.0)
            return
        if not isinstance(length, int) or not 0 < length <= end:
            raise ValueError(f"a cooldown needs 0 < length <= end, got end {end}, "
                             f"length {length!r}")
        self._end.assign(float(end))
        self._length.assign(float(length))

    @property
    def end(self) -> int | None:
        """The iteration at which the rate reaches zero, or None before a plan."""
        end = float(self._end.numpy())
        return None if end == _NO_END else int(end)

    @property
    def start(self) -> int | None:
        """The first iteration whose factor is below 1, or None before a plan."""
        end = self.end
        return None if end is None else end - int(self._length.numpy())

    def __call__(self, step):
        step = ops.cast(step, "float32")
        factor = ops.clip((self._end - step) / self._length, 0.0, 1.0)
        return self.schedule(step) * factor

    def get_config(self):
        end = self.end
        return {
            "schedule": keras.saving.serialize_keras_object(self.schedule),
            "end": end,
            "length": None if end is None else end - self.start,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["schedule"] = keras.saving.deserialize_keras_object(config["schedule"])
        return cls(**config)
