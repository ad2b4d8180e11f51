"""perfsuite: a pytest plugin and performance regression suite for deep-learning training."""

from perfsuite.contract.spec import BurstSpec
from perfsuite.models.registry import ModelInfo, register_model, register_token_model

__all__ = ["BurstSpec", "ModelInfo", "register_model", "register_token_model"]
__version__ = "0.3.0.dev0"  # the one place it is written: pyproject.toml reads it; CHANGELOG.md
