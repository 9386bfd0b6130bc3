"""What the user lets the search change: knobs pinned to a value, limited to a set, or excluded.

The cluster YAML's `search:` block, the CLI's `--fix/--allow/--exclude` and the MCP session all
build one `SearchConstraints`. Precision is the user's: unless `fix` or `allow` names `fp8`, the
search keeps the workload's FP8 setting (`oracle.constraints`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .config import TrialConfig


def _check(knob: str, value: Any) -> Any:
    """`value` as TrialConfig holds it for `knob` (raises ValueError naming the knob when illegal)."""
    if knob not in TrialConfig.model_fields:
        raise ValueError(f"unknown knob {knob!r} (one of {', '.join(TrialConfig.model_fields)})")
    if value is None:
        raise ValueError(f"{knob}: a value is needed (write none for a feature that is off)")
    try:
        return TrialConfig(**{knob: value}).__dict__[knob]
    except ValidationError as exc:
        raise ValueError(f"{knob}={value!r}: {exc.errors()[0]['msg']}") from None


class SearchConstraints(BaseModel):
    """Knobs fixed to one value, limited to a set of values, or excluded (kept at the workload's)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    fix: dict[str, Any] = Field(default_factory=dict)
    allow: dict[str, tuple[Any, ...]] = Field(default_factory=dict)
    exclude: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _known(self) -> SearchConstraints:
        fix = {k: _check(k, v) for k, v in self.fix.items()}
        allow = {k: tuple(_check(k, v) for v in values) for k, values in self.allow.items()}
        empty = [k for k, values in allow.items() if not values]
        if empty:
            raise ValueError(f"{', '.join(empty)}: allow at least one value")
        for k in self.exclude:
            if k not in TrialConfig.model_fields:
                raise ValueError(f"unknown knob {k!r} (one of {', '.join(TrialConfig.model_fields)})")
        both = (set(fix) & set(allow)) | (set(fix) & set(self.exclude)) | (set(allow) & set(self.exclude))
        if both:
            raise ValueError(f"{', '.join(sorted(both))}: a knob is fixed, allowed or excluded, not several")
        object.__setattr__(self, "fix", fix)
        object.__setattr__(self, "allow", allow)
        return self

    def merged(self, other: SearchConstraints) -> SearchConstraints:
        """These constraints with `other`'s on top (a knob `other` names takes `other`'s rule)."""
        named = set(other.fix) | set(other.allow) | set(other.exclude)
        return SearchConstraints(
            fix={**{k: v for k, v in self.fix.items() if k not in named}, **other.fix},
            allow={**{k: v for k, v in self.allow.items() if k not in named}, **other.allow},
            exclude=tuple(k for k in self.exclude if k not in named) + other.exclude,
        )

    def names(self, knob: str) -> bool:
        """Whether any rule names `knob`."""
        return knob in self.fix or knob in self.allow or knob in self.exclude
