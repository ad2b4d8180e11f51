"""Models for the attribution and memory tests, one per framework, registered the public way.

Both are a small CNN on 16x16 images. ``PERFSUITE_EXTRA_MATMUL=N`` makes every forward
pass also multiply two NxN matrices (made from the input, so TensorFlow cannot fold it
away): a known op that grows. ``PERFSUITE_EXTRA_MEMORY_MB=M`` makes the model keep an M MiB
tensor alive for the whole burst, touched so that it is resident: a known memory growth.
"""

import os

from perfsuite import register_model


def _extra_matmul() -> int:
    return int(os.environ.get("PERFSUITE_EXTRA_MATMUL", "0"))


def _extra_elements() -> int:
    return int(float(os.environ.get("PERFSUITE_EXTRA_MEMORY_MB", "0")) * 2**20) // 4


@register_model("opmix", framework="torch", image_size=16, batch_size=8, cpu_batch_size=8, num_classes=10)
def opmix_torch(num_classes: int = 10):
    import torch
    from torch import nn

    n, extra = _extra_matmul(), _extra_elements()

    class OpMix(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 32, 3, padding=1)
            self.fc = nn.Linear(32 * 8 * 8, num_classes)
            if extra:
                self.register_buffer("kept", torch.ones(extra), persistent=False)

        def forward(self, x):
            y = nn.functional.max_pool2d(torch.relu(self.conv(x)), 2)
            out = self.fc(y.flatten(1))
            if n:
                with torch.no_grad():
                    m = x.mean() + torch.ones(n, n, device=x.device)
                    waste = torch.mm(m, m).mean()
                out = out + 0 * waste
            return out

    return OpMix()


@register_model("opmix", framework="tf", image_size=16, batch_size=8, cpu_batch_size=8, num_classes=10)
def opmix_tf(num_classes: int = 10, image_size: int = 16):
    import keras
    import tensorflow as tf

    n, extra = _extra_matmul(), _extra_elements()

    class ExtraMatmul(keras.layers.Layer):
        def call(self, logits, images):
            m = tf.reduce_mean(images) + tf.ones([n, n])
            return logits + 0 * tf.reduce_mean(tf.matmul(m, m))

    images = keras.Input((image_size, image_size, 3))
    y = keras.layers.Conv2D(32, 3, padding="same", activation="relu")(images)
    y = keras.layers.MaxPooling2D(2)(y)
    logits = keras.layers.Dense(num_classes)(keras.layers.Flatten()(y))
    if n:
        logits = ExtraMatmul()(logits, images)
    model = keras.Model(images, logits)
    if extra:
        # A plain attribute, not a variable: kept alive, never part of the training state.
        object.__setattr__(model, "_perfsuite_kept", tf.ones([extra]))
    return model
