"""Keras models built for their structure alone, for tests that count, name and trace a model
but never run it: every variable gets its shape and dtype, no value (Keras's deferred
initialization). Drawing the values is most of the cost of building a full-size model
(10^8 random weights for VGG-16 or GPT-2) and changes none of what such a test checks."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any


def structure_only(build: Callable[..., Any], /, **kwargs: Any) -> Any:
    """``build(**kwargs)`` in a fresh Keras session, its variables left without values."""
    import keras

    keras.backend.clear_session(free_memory=False)  # names from 1 again; nothing large to collect
    with keras.StatelessScope(initialize_variables=False):
        model = build(**kwargs)
    # The variables stay on Keras's list of uninitialized ones, and the next StatelessScope to
    # close (any stateless_call) would draw all their values: a new session forgets the list.
    keras.backend.clear_session(free_memory=False)
    return model


@contextlib.contextmanager
def zero_weights(model) -> Iterator[None]:
    """Trace ``model`` with zeros for its variables. A variable without a value, read in a
    traced function, brings its initializer's ops into the graph instead: the same convolutions
    and matmuls, a slower trace."""
    import keras
    import tensorflow as tf

    with keras.StatelessScope(state_mapping=[(v, tf.zeros(v.shape, v.dtype)) for v in model.variables]):
        yield
