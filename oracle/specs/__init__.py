"""Typed specs at every boundary: model, training arguments, hardware, search point, result."""

from .config import KNOB_TO_ARG, EffectiveConfig, TrialConfig, resolve
from .hardware import Budget, ClusterSpec, GPUSpec
from .model import ModelArch
from .result import EvalResult, Violation
from .training import TrainingArgs
from .workload import Workload

__all__ = [
    "KNOB_TO_ARG",
    "Budget",
    "ClusterSpec",
    "EffectiveConfig",
    "EvalResult",
    "GPUSpec",
    "ModelArch",
    "TrainingArgs",
    "TrialConfig",
    "Violation",
    "Workload",
    "resolve",
]
