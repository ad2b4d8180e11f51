"""The torch residual block adds and activates in place: no new activation, the same arithmetic."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from perfsuite.models import registry  # noqa: E402
from perfsuite.models.torch.layers import Residual  # noqa: E402


class OutOfPlaceResidual(Residual):
    """The block as it was defined before: the sum in a new tensor."""

    def forward(self, x):
        return self.relu(self.body(x) + self.shortcut(x))


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny steps: one thread spares OpenMP's hand-offs, which dominate on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _resnet50():
    torch.manual_seed(0)
    info = registry.get_model("torch", "resnet50")
    return registry.resolve_builder(info)(num_classes=10)


def test_in_place_block_matches_the_out_of_place_one():
    """Same weights, same input: logits, every gradient and the batch-norm running
    statistics of a training step agree with the out-of-place form."""
    new = _resnet50()
    old = copy.deepcopy(new)
    blocks = [m for m in old.modules() if isinstance(m, Residual)]
    assert len(blocks) == 16
    for block in blocks:
        block.__class__ = OutOfPlaceResidual
    x = torch.randn(2, 3, 32, 32)
    y = torch.tensor([1, 7])
    results = []
    for model in (new, old):
        model.train()
        logits = model(x)
        torch.nn.functional.cross_entropy(logits, y).backward()
        results.append((logits, [p.grad for p in model.parameters()], list(model.buffers())))
    (logits_new, grads_new, bufs_new), (logits_old, grads_old, bufs_old) = results
    torch.testing.assert_close(logits_new, logits_old, rtol=1e-5, atol=1e-5)
    assert len(grads_new) == len(grads_old) == 161
    for a, b in zip(grads_new, grads_old):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    for a, b in zip(bufs_new, bufs_old):
        torch.testing.assert_close(a, b)


def test_block_output_is_the_body_output_storage():
    """The residual sum and its ReLU write into the body's output: no new tensor per block."""
    model = _resnet50()
    block = next(m for m in model.modules() if isinstance(m, Residual))
    seen = {}

    def storage(name):
        def hook(module, inputs, out):
            seen.setdefault(name, out.data_ptr())

        return hook

    block.body.register_forward_hook(storage("body"))
    block.register_forward_hook(storage("block"))
    model.train()
    model(torch.randn(2, 3, 32, 32)).sum().backward()
    assert seen["block"] == seen["body"]
