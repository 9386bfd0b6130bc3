"""A workload: one model architecture trained with one set of arguments."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from ..errors import InputError
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
    notes: tuple[str, ...] = ()  # how reading the file read a value (a deprecated spelling, ...), for the user
    primus_root: str | None = None  # the Primus tree a Primus experiment was read against (its launch targets it)

    def effective(self, trial: TrialConfig | None = None) -> EffectiveConfig:
        """The layout a trial gives on this workload (the baseline when `trial` is None)."""
        return resolve(self.training, trial or TrialConfig(), is_moe=self.model.is_moe)

    def knobs_of(self, layout: EffectiveConfig, *, file: str = "config") -> TrialConfig:
        """The knobs of a whole printed layout (an EvalResult's or summary's `config`); its other fields
        (sequence length, optimizer dtypes, ...) are workload settings, or follow from the knobs (sequence
        parallelism), and must be what this workload gives with those knobs."""
        knobs = layout.as_trial()
        base = self.effective(knobs)
        differs = sorted(k for k in EffectiveConfig.model_fields
                         if k not in TrialConfig.model_fields and getattr(layout, k) != getattr(base, k))
        if differs:
            raise InputError(f"{', '.join(differs)} differ from the workload's: they are workload settings, not "
                             "knobs; change them in the workload file", file=file, key=differs[0])
        return knobs
