"""The torch model zoo: sizes against published figures, FLOPs metadata, a training step."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from perfsuite.models import registry  # noqa: E402
from perfsuite.worker.backends.torch.flops import forward_flops, parameter_count  # noqa: E402

# Published parameter counts (torchvision for the ImageNet models it ships; timm/Cadene
# for Inception-v4; the TensorFlow tutorial's layer sizes for cifar10).
PUBLISHED_PARAMS = {
    "cifar10": 1_068_298,
    "alexnet": 61_100_840,
    "googlenet": 6_624_904,  # aux_logits=False
    "inception3": 23_834_568,  # aux_logits=False
    "inception4": 42_679_816,
    "resnet50": 25_557_032,
    "resnet152": 60_192_808,
    "vgg16": 138_357_544,
}
NAMES = sorted(PUBLISHED_PARAMS)
TRANSFORMERS = ["bert", "gpt2", "llama", "moe", "vit_b16"]  # tests/test_transformers_torch.py, test_moe_torch.py
TRAIN_STEP_MODELS = ("cifar10", "alexnet", "resnet50")
# The train step runs at most this image size: AlexNet (adaptive pooling before its classifier,
# 63 px at the least) and ResNet-50 (global pooling) train on any size from there, and a 224 px
# backward pass costs several times the time for the same finite-loss check.
TRAIN_STEP_IMAGE_SIZE = 64


@pytest.fixture(autouse=True)
def _one_thread():
    """One intra-op thread: with another process on the second core, two threads' spinning barriers
    cost several times the CPU of the same step on one."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _build(name: str):
    info = registry.get_model("torch", name)
    return info, registry.resolve_builder(info)(info.num_classes)


@pytest.fixture(scope="module", params=NAMES)
def built(request):
    """Each model on the meta device: its shapes, parameters and FLOPs are all there is to
    check, and building VGG-16's 138M weights for real would only cost time."""
    with torch.device("meta"):
        return _build(request.param)


def test_registry_lists_the_zoo():
    assert registry.model_names("torch") == sorted([*NAMES, *TRANSFORMERS])


def test_param_count(built):
    info, model = built
    count = parameter_count(model)
    assert count == info.params
    published = PUBLISHED_PARAMS[info.name]
    assert abs(count - published) <= 0.005 * published


def test_flops_metadata_matches_measurement(built):
    info, model = built
    # The one forward pass that counts the FLOPs shows the output's shape too (a meta pass of
    # the Inception and ResNet-152 graphs costs as much as the count).
    shapes = []
    hook = model.register_forward_hook(lambda module, args, out: shapes.append((args[0].shape, out.shape)))
    try:
        flops = forward_flops(model, info.image_size, torch.device("meta"))
    finally:
        hook.remove()
    image = (1, 3, info.image_size, info.image_size)
    assert shapes == [(image, (1, info.num_classes))]
    assert info.flops == pytest.approx(flops, rel=0.02)


def _finite(t) -> bool:
    """Every element finite: its least and greatest are (min and max propagate NaN), which costs a
    fraction of torch.isfinite's mask over AlexNet's 61M gradients."""
    return all(math.isfinite(v.item()) for v in torch.aminmax(t))


@pytest.mark.parametrize("name", TRAIN_STEP_MODELS)
def test_train_step_gives_finite_loss(name):
    torch.manual_seed(0)
    info, model = _build(name)
    model.train()
    size = min(info.image_size, TRAIN_STEP_IMAGE_SIZE)
    x = torch.randn(2, 3, size, size)
    y = torch.randint(0, info.num_classes, (2,))
    logits = model(x)
    assert logits.shape == (2, info.num_classes)
    loss = torch.nn.functional.cross_entropy(logits, y)
    loss.backward()
    assert math.isfinite(loss.item())
    assert all(_finite(p.grad) for p in model.parameters() if p.grad is not None)


def test_channels_last_under_autocast():
    # The bursts run channels_last under autocast; bfloat16 is autocast's CPU dtype.
    info, model = _build("cifar10")
    model = model.to(memory_format=torch.channels_last)
    x = torch.randn(2, 3, info.image_size, info.image_size).to(memory_format=torch.channels_last)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(x)
    assert logits.dtype == torch.bfloat16
    loss = torch.nn.functional.cross_entropy(logits.float(), torch.zeros(2, dtype=torch.long))
    loss.backward()
    assert math.isfinite(loss.item())


def test_model_modules_import_without_torch():
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import perfsuite.models.registry as r\n"
        "print(','.join(m.name for m in r.all_models('torch')))\n"
    )
    root = Path(__file__).resolve().parents[1]
    path = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip().split(",") == sorted([*NAMES, *TRANSFORMERS])
