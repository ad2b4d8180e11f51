"""The model registry: metadata of every model, importable without torch or tensorflow.

A model is a builder function registered with ``@register_model``. The decorator only
records metadata and where the builder lives; the builder itself imports its framework
when called, inside a burst worker, so listing or validating models stays light.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perfsuite.contract.model_info import ModelInfo

FRAMEWORKS = ("torch", "tf")

# Built-in model modules, imported on first use of the registry.
_BUILTIN_MODULES = {
    "torch": (
        "perfsuite.models.torch.cifar10",
        "perfsuite.models.torch.alexnet",
        "perfsuite.models.torch.googlenet",
        "perfsuite.models.torch.inception3",
        "perfsuite.models.torch.inception4",
        "perfsuite.models.torch.resnet",
        "perfsuite.models.torch.vgg",
    ),
    "tf": (
        "perfsuite.models.tf.cifar10",
        "perfsuite.models.tf.alexnet",
        "perfsuite.models.tf.googlenet",
        "perfsuite.models.tf.inception3",
        "perfsuite.models.tf.inception4",
        "perfsuite.models.tf.resnet",
        "perfsuite.models.tf.vgg",
    ),
}


_REGISTRY: dict[tuple[str, str], ModelInfo] = {}
_loaded = False


class ModelError(LookupError):
    pass


def register_model(
    name: str,
    *,
    framework: str,
    image_size: int,
    batch_size: int,
    params: int | None = None,
    flops: float | None = None,
    num_classes: int = 1000,
    cpu_batch_size: int | None = None,
    description: str = "",
) -> Callable:
    """Register a model builder: ``@register_model("resnet50", framework="torch", ...)``.

    The builder takes ``num_classes`` (a TensorFlow builder may also take ``image_size``)
    and returns an untrained model of the framework. ``params`` and ``flops`` (forward FLOPs
    per image) may be left out: the burst worker then counts and measures them.
    Registering the same (framework, name) from the same builder again is a no-op, so a
    module may be imported twice (conftest and worker) without complaint.
    """
    if framework not in FRAMEWORKS:
        raise ModelError(f"framework must be one of {', '.join(FRAMEWORKS)}, not {framework!r}")
    for what, value in (
        ("image_size", image_size),
        ("batch_size", batch_size),
        ("params", params),
        ("flops", flops),
        ("num_classes", num_classes),
        ("cpu_batch_size", cpu_batch_size),
    ):
        if value is None and what in ("params", "flops", "cpu_batch_size"):
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ModelError(f"model {name!r}: {what} must be a positive number, got {value!r}")

    def decorate(fn: Callable) -> Callable:
        module = fn.__module__
        source = None
        if module == "__main__" or not module.startswith("perfsuite."):
            try:
                source = str(Path(inspect.getfile(fn)).resolve())
            except (TypeError, OSError):
                source = None
        info = ModelInfo(
            name=name,
            framework=framework,
            image_size=image_size,
            batch_size=batch_size,
            cpu_batch_size=cpu_batch_size or max(1, batch_size // 16),
            params=params,
            flops=flops,
            num_classes=num_classes,
            builder=f"{module}:{fn.__qualname__}",
            source=source,
            description=description or (inspect.getdoc(fn) or "").split("\n")[0],
        )
        old = _REGISTRY.get((framework, name))
        if old is not None and old.builder != info.builder:
            raise ModelError(f"model {name!r} for {framework} is already registered by {old.builder}")
        _REGISTRY[(framework, name)] = info
        return fn

    return decorate


def _load_builtins() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for modules in _BUILTIN_MODULES.values():
        for module in modules:
            importlib.import_module(module)


def all_models(framework: str | None = None) -> list[ModelInfo]:
    _load_builtins()
    return sorted(
        (m for m in _REGISTRY.values() if framework in (None, m.framework)),
        key=lambda m: (m.framework, m.name),
    )


def model_names(framework: str | None = None) -> list[str]:
    return sorted({m.name for m in all_models(framework)})


def get_model(framework: str, name: str) -> ModelInfo:
    _load_builtins()
    try:
        return _REGISTRY[(framework, name)]
    except KeyError:
        known = ", ".join(model_names(framework)) or "none"
        raise ModelError(f"no {framework} model named {name!r} (known: {known})") from None


def load_file(path: str | Path) -> None:
    """Run a file that registers models (a conftest.py, say), as pytest would import it."""
    path = Path(path).resolve()
    if not path.is_file():
        raise ModelError(f"{path}: no such file")
    name = f"perfsuite_models_{abs(hash(str(path)))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ModelError(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, str(path.parent))  # its own imports, as pytest's rootdir-relative import allows
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))


def resolve_builder(info: ModelInfo) -> Callable:
    """Import the builder function; in a worker process, load a user's file by path."""
    module_name, qualname = info.builder.split(":")
    if module_name in sys.modules:
        module = sys.modules[module_name]
    elif info.source is not None:
        spec = importlib.util.spec_from_file_location(module_name, info.source)
        if spec is None or spec.loader is None:
            raise ModelError(f"cannot load model {info.name!r} from {info.source}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(module_name)
    obj: Any = module
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj
