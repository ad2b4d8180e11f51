"""TensorFlow's deterministic settings for the numerics stretch (perfsuite.worker.numerics).

``tf.config.experimental.enable_op_determinism()`` decides some things when they are made, not
when they run: a tf.data pipeline made under it stays serial (a map with random ops runs one
element at a time, a generator's prefetch is dropped), and a step traced under it keeps what it
chose. So the stretch takes a step of its own, with an input pipeline of its own, both made once
the setting is on (``stretch_step``); the setting is switched off after it, and the burst's own
pipeline and step, made without it, run the warm-up and the timed windows: on a shared 2-vCPU
machine a stateful map's pipeline made under op determinism gave about half the batches a second.
"""

from __future__ import annotations

from perfsuite.contract.spec import BurstSpec
from perfsuite.worker.numerics import Settings, reductions_note

NAME = "tf.config.experimental.enable_op_determinism"


def settings(spec: BurstSpec) -> Settings:
    import tensorflow as tf
    from tensorflow.python.framework import config

    def on() -> None:
        tf.config.experimental.enable_op_determinism()

    def off() -> str | None:
        config.disable_op_determinism()
        return None

    return Settings(NAME, on, off, note=reductions_note(spec), unsupported=(tf.errors.UnimplementedError,))


def versions() -> dict[str, str]:
    """What else the losses depend on: Keras's layers and initialisers, and NumPy's seeded data."""
    import keras
    import numpy

    return {"keras": keras.__version__, "numpy": numpy.__version__}
