"""torch's deterministic settings for the numerics stretch (perfsuite.worker.numerics).

``torch.use_deterministic_algorithms(True)``, in its warn-only form: an op without a deterministic
kernel warns instead of failing the burst, and the stretch's record names it. On a GPU, cuDNN's
deterministic algorithms with its autotuning off (``benchmark`` picks the fastest algorithm, not
the same one). Everything is set back when the stretch ends, so the timed windows run as they
would without it.
"""

from __future__ import annotations

import warnings

import torch

from perfsuite.contract.spec import BurstSpec
from perfsuite.worker.numerics import Settings, reductions_note

NAME = "torch.use_deterministic_algorithms"


def settings(spec: BurstSpec, device: torch.device) -> Settings:
    saved: dict[str, object] = {}
    caught: list[list[warnings.WarningMessage]] = []  # the log catch_warnings appends to
    catcher = warnings.catch_warnings(record=True)

    def on() -> None:
        saved.update(
            algorithms=torch.are_deterministic_algorithms_enabled(),
            warn_only=torch.is_deterministic_algorithms_warn_only_enabled(),
            benchmark=torch.backends.cudnn.benchmark,
            cudnn=torch.backends.cudnn.deterministic,
        )
        caught[:] = [catcher.__enter__() or []]
        warnings.simplefilter("always")
        torch.use_deterministic_algorithms(True, warn_only=True)
        if device.type == "cuda":
            torch.backends.cudnn.benchmark = False
            torch.backends.cudnn.deterministic = True

    def off() -> str | None:
        torch.use_deterministic_algorithms(bool(saved["algorithms"]), warn_only=bool(saved["warn_only"]))
        torch.backends.cudnn.benchmark = bool(saved["benchmark"])
        torch.backends.cudnn.deterministic = bool(saved["cudnn"])
        met = list(caught[0]) if caught else []
        catcher.__exit__(None, None, None)
        return nondeterministic(str(w.message) for w in met)

    return Settings(NAME, on, off, note=reductions_note(spec))


def nondeterministic(messages) -> str | None:
    """What torch's warn-only alerts said ran nondeterministically, in a few words; None: nothing."""
    found = []
    for text in messages:
        if "CUBLAS_WORKSPACE_CONFIG" in text:
            found.append("cuBLAS without CUBLAS_WORKSPACE_CONFIG=:4096:8 (set it for bit-equal losses)")
        elif "does not have a deterministic implementation" in text:
            op = text.split(" does not have a deterministic implementation")[0].strip()
            found.append(f"{op} has no deterministic kernel")
        elif "defaults to a non-deterministic algorithm" in text:
            # SDPA's flash and memory-efficient backward: deterministic only where the settings are
            # not warn-only, so under the stretch's they ran as they always do
            kernel = text.split(" defaults to a non-deterministic algorithm")[0].strip()
            found.append(f"{kernel} backward runs nondeterministically under warn-only settings")
    return "; ".join(dict.fromkeys(found)) or None


def versions() -> dict[str, str]:
    """What else the losses depend on: the seeded data is NumPy's."""
    import numpy

    return {"numpy": numpy.__version__}
