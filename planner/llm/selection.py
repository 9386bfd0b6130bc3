"""Which LLM the investigator (and `query_llm`) uses, and whether its credentials are present.

One precedence, environment first:
  model    = env LLM_MODEL, else the cluster file's agent.llm.model, else openai/gpt-4o (LiteLLM
             `provider/model`); the phase runs only when that model's credentials are present.
  api_base = env OPENAI_API_BASE, for openai/... models (an OpenAI-compatible endpoint).
  key      = the provider's usual variable as LiteLLM knows it (OPENAI_API_KEY for openai/..., ...);
             an openai/... model with OPENAI_API_BASE set needs no key.
Keys are read by LiteLLM from the environment only: never copied into the config, ledger or artifacts.
"""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel

from .env_file import source_of, supplied

KEYLESS_PLACEHOLDER = "unused"  # OpenAI-compatible endpoints without auth still need a non-empty key
DRY_RUN = "--dry-run"


class LLMNotConfigured(Exception):
    """No model is named, or its credentials are missing; the message says which."""


class LLMConfig(BaseModel):
    """The resolved model and where it came from (no secrets)."""

    model: str
    source: Literal["env LLM_MODEL", ".env LLM_MODEL", "cluster agent.llm.model", "default", "--dry-run"]
    api_base: str | None = None
    credentials: str = ""  # where the key and endpoint came from: variable names and sources, never values


def offline_litellm() -> None:
    """Make LiteLLM use its bundled price table instead of fetching one at import (no network needed)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


DEFAULT_MODEL = "openai/gpt-4o"


def named_llm(cluster_model: str | None) -> LLMConfig:
    """The model the precedence names (credentials unchecked)."""
    env_model = os.environ.get("LLM_MODEL", "").strip()
    if env_model:
        return LLMConfig(model=env_model, source=".env LLM_MODEL" if "LLM_MODEL" in supplied else "env LLM_MODEL")
    if cluster_model:
        return LLMConfig(model=cluster_model, source="cluster agent.llm.model")
    return LLMConfig(model=DEFAULT_MODEL, source="default")


def resolve_llm(cluster_model: str | None) -> LLMConfig:
    """The configured LLM with its credentials present, or LLMNotConfigured with the reason."""
    offline_litellm()
    config = named_llm(cluster_model)
    found = [n for n in sorted(os.environ) if n.endswith("_API_KEY") or n in ("OPENAI_API_BASE",)]
    config = config.model_copy(update={"credentials": ", ".join(f"{n} ({source_of(n)})" for n in found)})
    if config.model.startswith("openai/") and os.environ.get("OPENAI_API_BASE"):
        return config.model_copy(update={"api_base": os.environ["OPENAI_API_BASE"]})
    if config.model.startswith("openai/") and "OPENAI_API_KEY" not in os.environ:
        # an openai/... model (the default, and the shipped clusters' agent.llm.model) without its key or an
        # endpoint: LiteLLM's answer (litellm/utils.py validate_environment, provider "openai" from the
        # model's prefix: OPENAI_API_KEY), without importing it (seconds) in every run that has no LLM
        raise _missing(config, ["OPENAI_API_KEY"])
    try:
        import litellm
    except ImportError:
        raise LLMNotConfigured(f"LLM {config.model} is named but LiteLLM is not installed "
                               "(pip install 'paratune[llm]')") from None
    missing = litellm.validate_environment(config.model).get("missing_keys") or []
    if missing:
        raise _missing(config, missing)
    return config


def _missing(config: LLMConfig, keys: list[str]) -> LLMNotConfigured:
    """The error for a model whose credentials are missing, naming the variables."""
    return LLMNotConfigured(f"LLM {config.model} (from {config.source}) needs {', '.join(keys)} in the environment")


def dry_run_llm() -> LLMConfig:
    """The scripted LM of `--dry-run` (no provider, no key)."""
    return LLMConfig(model="dry-run/scripted", source=DRY_RUN)
