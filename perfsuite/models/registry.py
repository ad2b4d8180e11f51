"""The model registry: metadata of every model, importable without torch or tensorflow.

A model is a builder function registered with ``@register_model`` (an image model) or
``@register_token_model`` (a token model). The decorator only records metadata and where
the builder lives; the builder itself imports its framework when called, inside a burst
worker, so listing or validating models stays light.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import pkgutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perfsuite.contract.model_info import OBJECTIVES, OPTIMIZERS, ModelInfo

FRAMEWORKS = ("torch", "tf")

# The zoo's packages: every module in them registers its models, imported on first use of the
# registry, so a new model is one module there. Modules named ``*layers`` are the zoo's shared
# building blocks, which import their framework at the top.
_ZOO = {"torch": "perfsuite.models.torch", "tf": "perfsuite.models.tf"}


def _zoo_modules(framework: str) -> list[str]:
    package = importlib.import_module(_ZOO[framework])
    names = (m.name for m in pkgutil.iter_modules(package.__path__) if not m.ispkg)
    return [f"{package.__name__}.{name}" for name in sorted(names) if not name.endswith("layers")]


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
    optimizer: str = "sgd",
    description: str = "",
) -> Callable:
    """Register an image model builder: ``@register_model("resnet50", framework="torch", ...)``.

    The builder takes ``num_classes`` (a TensorFlow builder may also take ``image_size``)
    and returns an untrained model of the framework, from images to logits. ``params`` and
    ``flops`` (forward FLOPs per image) may be left out: the burst worker then counts and
    measures them. ``optimizer`` is what a burst trains it with: "sgd" (the CNNs) or
    "adamw" (ViT). Registering the same (framework, name) from the same builder again is a
    no-op, so a module may be imported twice (conftest and worker) without complaint.
    """
    _check_framework(framework)
    _check_positive(
        name,
        required={"image_size": image_size, "batch_size": batch_size, "num_classes": num_classes},
        optional={"params": params, "flops": flops, "cpu_batch_size": cpu_batch_size},
    )
    _check_choice(name, "optimizer", optimizer, OPTIMIZERS)

    def decorate(fn: Callable) -> Callable:
        return _register(
            fn,
            name=name,
            framework=framework,
            image_size=image_size,
            batch_size=batch_size,
            cpu_batch_size=cpu_batch_size or max(1, batch_size // 16),
            params=params,
            flops=flops,
            num_classes=num_classes,
            optimizer=optimizer,
            description=description,
        )

    return decorate


def register_token_model(
    name: str,
    *,
    framework: str,
    seq_len: int,
    vocab_size: int,
    batch_size: int,
    objective: str,
    layers: int,
    heads: int,
    head_dim: int,
    embedding_params: int,
    params: int | None = None,
    active_params: int | None = None,
    cpu_batch_size: int | None = None,
    cpu_seq_len: int | None = None,
    optimizer: str = "adamw",
    description: str = "",
    tp_plan: Callable | str | None = None,
) -> Callable:
    """Register a token model builder: ``@register_token_model("gpt2", framework="torch", ...)``.

    The builder is called as ``builder(vocab_size=..., seq_len=...)`` and returns an
    untrained model of the framework. In torch, an ``nn.Module`` whose forward takes int64
    ids ``[batch, seq]`` and returns float logits ``[batch, seq, vocab]``; in TensorFlow,
    a Keras model from int32 ids ``[batch, seq]`` to logits ``[batch, seq, vocab]``.

    A burst trains it on the cross-entropy of the logits against targets, positions whose
    target is -100 ignored. ``objective="causal"`` (a decoder): the targets are the ids
    shifted by one, each position predicting the next token (the model masks the future
    itself). ``objective="masked"`` (a masked LM): the targets are the original ids at the
    masked positions and -100 elsewhere.

    ``seq_len`` is the default sequence length on an accelerator, ``cpu_seq_len`` per CPU
    worker (default: the smaller of ``seq_len`` and 128). ``layers``, ``heads`` (query
    heads), ``head_dim`` and ``embedding_params`` give the FLOPs per token,
    ``6 * (params - embedding_params) + 12 * layers * heads * head_dim * seq_len``
    (``ModelInfo.train_flops_per_item`` says which embeddings to leave out). ``params``
    may be left out: the burst worker then counts it. A mixture of experts gives
    ``active_params`` too, the parameters one token's forward pass uses (all but the experts it
    is not routed to): its FLOPs count those in the place of ``params``.

    ``tp_plan`` (torch) makes the model a tensor-parallel one (``--perf-tp``): a function
    ``tp_plan(model, tp_mesh)``, or its ``"module:function"``, that splits the built model's
    layers over the 1-D DeviceMesh of one TP group in place (``parallelize_module``), each
    attention module left counting its local heads. It lives in the builder's module or in an
    importable one. Without one, the model's TP cases are skipped.
    """
    figures = {"seq_len": seq_len, "vocab_size": vocab_size, "batch_size": batch_size}
    figures |= {"layers": layers, "heads": heads, "head_dim": head_dim}
    _check_framework(framework)
    optional = {
        "params": params,
        "active_params": active_params,
        "cpu_batch_size": cpu_batch_size,
        "cpu_seq_len": cpu_seq_len,
    }
    _check_positive(name, required=figures, optional=optional, integers=True)
    _check_choice(name, "objective", objective, OBJECTIVES)
    _check_choice(name, "optimizer", optimizer, OPTIMIZERS)
    if isinstance(embedding_params, bool) or not isinstance(embedding_params, int) or embedding_params < 0:
        raise ModelError(f"model {name!r}: embedding_params must be a whole number >= 0, got {embedding_params!r}")
    if params is not None and embedding_params >= params:
        raise ModelError(f"model {name!r}: embedding_params ({embedding_params}) must be below params ({params})")
    if active_params is not None and (params is None or not embedding_params < active_params <= params):
        raise ModelError(
            f"model {name!r}: active_params ({active_params}) must be above embedding_params ({embedding_params}) "
            f"and at most params ({params})"
        )
    fields = {
        **figures,
        "name": name,
        "framework": framework,
        "image_size": None,
        "cpu_batch_size": cpu_batch_size or max(1, batch_size // 16),
        "cpu_seq_len": cpu_seq_len or min(seq_len, 128),
        "params": params,
        "active_params": active_params,
        "flops": None,  # per token, from the structure: ModelInfo.train_flops_per_item
        "num_classes": vocab_size,
        "optimizer": optimizer,
        "description": description,
        "workload": "token",
        "objective": objective,
        "embedding_params": embedding_params,
        "tp_plan": _reference(name, "tp_plan", tp_plan),
    }
    return lambda fn: _register(fn, **fields)


def _reference(name: str, what: str, fn: Callable | str | None) -> str | None:
    """``fn`` as the "module:qualname" a worker imports it by; a string is taken as one."""
    if fn is None:
        return None
    if isinstance(fn, str):
        if ":" not in fn:
            raise ModelError(f"model {name!r}: {what} must be a function or 'module:function', not {fn!r}")
        return fn
    if not callable(fn):
        raise ModelError(f"model {name!r}: {what} must be a function or 'module:function', not {fn!r}")
    return f"{fn.__module__}:{fn.__qualname__}"


def _check_framework(framework: str) -> None:
    if framework not in FRAMEWORKS:
        raise ModelError(f"framework must be one of {', '.join(FRAMEWORKS)}, not {framework!r}")


def _check_positive(name: str, required: dict, optional: dict, integers: bool = False) -> None:
    """Each figure a positive number (a whole one where ``integers``); an optional one may be None."""
    kinds = (int,) if integers else (int, float)
    for what, value in (*required.items(), *optional.items()):
        if value is None and what in optional:
            continue
        if isinstance(value, bool) or not isinstance(value, kinds) or not value > 0:
            article = "a positive whole number" if integers else "a positive number"
            raise ModelError(f"model {name!r}: {what} must be {article}, got {value!r}")


def _check_choice(name: str, what: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ModelError(f"model {name!r}: {what} must be one of {', '.join(choices)}, not {value!r}")


def _register(fn: Callable, **fields: Any) -> Callable:
    module = fn.__module__
    source = None
    if module == "__main__" or not module.startswith("perfsuite."):
        try:
            source = str(Path(inspect.getfile(fn)).resolve())
        except (TypeError, OSError):
            source = None
    fields["description"] = fields["description"] or (inspect.getdoc(fn) or "").split("\n")[0]
    info = ModelInfo(builder=f"{module}:{fn.__qualname__}", source=source, **fields)
    old = _REGISTRY.get((info.framework, info.name))
    if old is not None and old.builder != info.builder:
        raise ModelError(f"model {info.name!r} for {info.framework} is already registered by {old.builder}")
    _REGISTRY[(info.framework, info.name)] = info
    return fn


def _load_builtins() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for framework in _ZOO:
        for module in _zoo_modules(framework):
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
    return _resolve(info, info.builder)


def resolve_tp_plan(info: ModelInfo) -> Callable:
    """Import the model's tensor-parallel plan (``register_token_model(..., tp_plan=...)``), from
    the builder's module (a user's file by path) or an importable one."""
    if info.tp_plan is None:
        raise ModelError(f"model {info.name!r} has no tensor-parallel plan")
    return _resolve(info, info.tp_plan)


def _resolve(info: ModelInfo, reference: str) -> Callable:
    module_name, qualname = reference.split(":")
    if module_name in sys.modules:
        module = sys.modules[module_name]
    elif info.source is not None and module_name == info.builder.split(":")[0]:
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
