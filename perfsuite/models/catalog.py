"""What the documented models share across frameworks: input size, batch sizes, classes.

Both registries take these from here, so a torch burst and a TF burst of the same model
name always feed the same images in the same batches. Parameter counts and FLOPs stay
with each definition: keras.applications' variants differ slightly from the torch ones.
"""

from __future__ import annotations

SHAPES: dict[str, dict] = {
    # batch_size: per GPU, as in the source benchmarks; cpu_batch_size: per CPU worker,
    # small enough that a window of a big model stays within seconds on a few cores.
    "cifar10": {"image_size": 24, "batch_size": 128, "cpu_batch_size": 64, "num_classes": 10},
    "alexnet": {"image_size": 224, "batch_size": 128, "cpu_batch_size": 8},
    "googlenet": {"image_size": 224, "batch_size": 64, "cpu_batch_size": 4},
    "inception3": {"image_size": 299, "batch_size": 64, "cpu_batch_size": 2},
    "inception4": {"image_size": 299, "batch_size": 64, "cpu_batch_size": 2},
    "resnet50": {"image_size": 224, "batch_size": 64, "cpu_batch_size": 2},
    "resnet152": {"image_size": 224, "batch_size": 64, "cpu_batch_size": 2},
    "vgg16": {"image_size": 224, "batch_size": 64, "cpu_batch_size": 2},
}

# GoogLeNet, Table 1 of the paper: #1x1, #3x3 reduce, #3x3, #5x5 reduce, #5x5, pool proj.
GOOGLENET_INCEPTION = {
    "3a": (64, 96, 128, 16, 32, 32),
    "3b": (128, 128, 192, 32, 96, 64),
    "4a": (192, 96, 208, 16, 48, 64),
    "4b": (160, 112, 224, 24, 64, 64),
    "4c": (128, 128, 256, 24, 64, 64),
    "4d": (112, 144, 288, 32, 64, 64),
    "4e": (256, 160, 320, 32, 128, 128),
    "5a": (256, 160, 320, 32, 128, 128),
    "5b": (384, 192, 384, 48, 128, 128),
}
