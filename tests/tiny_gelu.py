"""A tiny registered model whose GELU is exact, or the tanh approximation where
``PERFSUITE_GELU_APPROXIMATE=tanh``: a kernel change that leaves its speed as it was and its
losses not bit-equal, for the numerics gate's tests. In torch and Keras: 8x8 images through one
hidden layer of 32 units to 10 classes (CIFAR-10's, for the real data location), milliseconds a step."""

import os

from perfsuite import register_model

HIDDEN = 32


def _approximate() -> bool:
    return os.environ.get("PERFSUITE_GELU_APPROXIMATE") == "tanh"


@register_model("tiny_gelu", framework="torch", image_size=8, batch_size=8, cpu_batch_size=8, num_classes=10)
def tiny_gelu_torch(num_classes: int = 10):
    from torch import nn

    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(3 * 8 * 8, HIDDEN),
        nn.GELU(approximate="tanh" if _approximate() else "none"),
        nn.Linear(HIDDEN, num_classes),
    )


@register_model("tiny_gelu", framework="tf", image_size=8, batch_size=8, cpu_batch_size=8, num_classes=10)
def tiny_gelu_tf(num_classes: int = 10, image_size: int = 8):
    import keras

    approximate = _approximate()
    images = keras.Input((image_size, image_size, 3))
    hidden = keras.layers.Dense(HIDDEN)(keras.layers.Flatten()(images))
    hidden = keras.layers.Activation(lambda x: keras.activations.gelu(x, approximate=approximate))(hidden)
    return keras.Model(images, keras.layers.Dense(num_classes)(hidden))
