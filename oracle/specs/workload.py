"""A workload: one model architecture trained with one set of arguments."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from .config import EffectiveConfig, TrialConfig, resolve
from .model import ModelArch
from .training import TrainingArgs


class Workload(BaseModel):
    """What to train (model) and how the user currently plans to (training arguments)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    model: ModelArch
    training: TrainingArgs
    stack: str = "megatron-lm"  # whose defaults the arguments follow: megatron-lm | megatron-bridge | primus
    not_modelled: tuple[str, ...] = ()  # real stack arguments the file sets that the oracle does not model

    def effective(self, trial: TrialConfig | None = None) -> EffectiveConfig:
        """The layout a trial gives on this workload (the baseline when `trial` is None)."""
        return resolve(self.training, trial or TrialConfig(), is_moe=self.model.is_moe)
