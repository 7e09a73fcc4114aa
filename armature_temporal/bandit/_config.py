"""A bandit's configuration: its arms, storage, dynamics, contexts and evolution (pydantic).

Accepted as a model or as the plain dict the standalone API takes::

    {"arms": [{"arm_id": "concise", "params": {"temperature": 0.2}}, ...],
     "storage": {"backend": "sqlite", "path": "armature.db"}}

Every field does something; the defaults are the tuned ones the benchmarks measure.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from armature_temporal.bandit._errors import BanditConfigError
from armature_temporal.bandit._math import Dynamics, SelectionRule

__all__ = [
    "ArmConfig",
    "BanditConfig",
    "ChangeDetectionConfig",
    "ChoiceParam",
    "ContextConfig",
    "EvolutionConfig",
    "FloatParam",
    "IntParam",
    "ParamSpec",
    "StorageConfig",
    "context_key",
    "parse_config",
]

ARM_ID_PATTERN = r"^[A-Za-z0-9_.-]{1,100}$"
NAME_PATTERN = r"^[A-Za-z0-9_.:-]{1,100}$"
_CONTEXT_KEY_MAX = 200
REDIS_PREFIX = "armature:bandit:"
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ArmConfig(_Model):
    """One arm: a stable id, the params a caller applies when it is selected, a Beta prior."""

    arm_id: str = Field(..., pattern=ARM_ID_PATTERN, description="Stable id of the arm.")
    params: dict[str, Any] = Field(default_factory=dict, description="Handed back on selection.")
    prior: tuple[Annotated[float, Field(gt=0)], Annotated[float, Field(gt=0)]] = Field(
        (1.0, 1.0), description="Beta prior (alpha, beta); (1, 1) is uniform."
    )


class StorageConfig(_Model):
    """Where posteriors and decisions live. ``sqlite``/``postgres``/``redis`` are shared by
    processes.

    ``backend`` left out means the Armature database: ``$ARMATURE_DB_URL``, else SQLite under
    ``$ARMATURE_HOME``. ``redis`` keeps everything on a Redis server (``url``, default
    ``$ARMATURE_REDIS_URL``, else ``redis://127.0.0.1:6379/0``) under the keys ``prefix``.
    """

    backend: Literal["memory", "sqlite", "postgres", "redis"] | None = None
    path: str | None = Field(None, description="SQLite file (default: the Armature database).")
    url: str | None = Field(
        None,
        description="SQLAlchemy URL (default $ARMATURE_DB_URL), or for redis a redis:// "
        "URL (default $ARMATURE_REDIS_URL, else redis://127.0.0.1:6379/0).",
    )
    prefix: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9_.:-]{1,100}$",
        description=f"redis only: the prefix of every key (default {REDIS_PREFIX!r}); bandits "
        "under different prefixes on one server are separate stores.",
    )

    @model_validator(mode="after")
    def _coherent(self) -> StorageConfig:
        if self.path is not None and self.backend not in ("sqlite", None):
            raise ValueError(f"'path' is for the sqlite backend, not {self.backend!r}; use 'url'")
        if self.prefix is not None and self.backend != "redis":
            raise ValueError(
                f"'prefix' is for the redis backend, not {self.backend!r}; set backend: redis "
                "or leave 'prefix' out"
            )
        if self.url is not None:
            wanted = {
                "sqlite": ("sqlite",),
                "postgres": ("postgresql",),
                "redis": REDIS_SCHEMES,
                "memory": (),
                None: ("sqlite", "postgresql"),
            }[self.backend]
            if not self.url.startswith(wanted):
                raise ValueError(
                    f"url {self.url!r} does not fit backend {self.backend!r}; use a "
                    "postgresql+psycopg://... URL for postgres, sqlite:///... for sqlite, "
                    "redis://host:6379/0 (or rediss://, unix://) with backend: redis"
                )
        return self


class ChangeDetectionConfig(_Model):
    """Per-arm two-sided CUSUM on the reward stream (see :mod:`._math`)."""

    method: Literal["cusum", "none"] = "cusum"
    drift: float = Field(0.15, gt=0.0, lt=1.0, description="Allowance per reward.")
    threshold: float = Field(8.6, gt=0.0, description="Alarm level; higher: fewer false alarms.")
    warmup: int = Field(0, ge=0, description="Rewards after a reset before the test runs.")
    reset: Literal["context", "arm"] = Field(
        "context", description="On a change, forget every arm of the context, or just the arm."
    )


class ContextConfig(_Model):
    """Per-context posteriors, seeded from the global one."""

    enabled: bool = True
    keys: list[str] | None = Field(
        None, description="Context fields that form the key (default: all of them)."
    )
    seed_strength: float = Field(
        1.0,
        ge=0.0,
        description="Pseudo-observations a context's arm borrows from the global posterior "
        "while it has no evidence of its own (fading as 1 / (1 + own evidence)).",
    )


class FloatParam(_Model):
    type: Literal["float"]
    low: float
    high: float

    @model_validator(mode="after")
    def _ordered(self) -> FloatParam:
        if not (math.isfinite(self.low) and math.isfinite(self.high) and self.low < self.high):
            raise ValueError(f"need finite low < high, got low={self.low!r} high={self.high!r}")
        return self


class IntParam(_Model):
    type: Literal["int"]
    low: int
    high: int

    @model_validator(mode="after")
    def _ordered(self) -> IntParam:
        if self.low >= self.high:
            raise ValueError(f"need low < high, got low={self.low!r} high={self.high!r}")
        return self


class ChoiceParam(_Model):
    type: Literal["choice"]
    choices: list[str | int | float | bool] = Field(..., min_length=1)


ParamSpec = Annotated[FloatParam | IntParam | ChoiceParam, Field(discriminator="type")]


class EvolutionConfig(_Model):
    """Breeding new arms from the best and retiring hopeless ones (run by ``maintenance``)."""

    params: dict[str, ParamSpec] = Field(..., min_length=1, description="Declared search space.")
    parents: int = Field(2, ge=1, description="Top arms (by posterior mean) that breed.")
    children_per_round: int = Field(1, ge=0)
    max_arms: int = Field(8, ge=2, description="Active arms at most; breeding stops there.")
    min_pulls: int = Field(100, ge=1, description="Pulls before an arm may breed or retire.")
    mutation_rate: float = Field(0.3, ge=0.0, le=1.0, description="Chance each param mutates.")
    mutation_scale: float = Field(0.15, gt=0.0, le=1.0, description="Std-dev, share of range.")
    prior_shrink: float = Field(0.5, ge=0.0, le=1.0, description="Share of parent evidence.")
    prior_max: float = Field(20.0, ge=0.0, description="Cap on a child's prior pseudo-counts.")
    retire_below: float = Field(0.02, ge=0.0, lt=1.0, description="P(best) under which arms go.")
    retire_patience: int = Field(2, ge=1, description="Consecutive rounds below before retiring.")
    min_active: int = Field(2, ge=1, description="Never retire below this many active arms.")


class BanditConfig(_Model):
    """Everything about one bandit. See the module docstring for the dict form."""

    arms: list[ArmConfig] = Field(..., min_length=1)
    storage: StorageConfig = Field(default_factory=StorageConfig)
    sampling: Literal["optimistic", "thompson"] = Field(
        "optimistic", description="Floor each posterior draw at its mean, or plain draws."
    )
    discount: float = Field(1.0, gt=0.0, le=1.0, description="Evidence decay per reward.")
    window: int | None = Field(None, ge=2, description="Cap on an arm's evidence (pulls).")
    change_detection: ChangeDetectionConfig = Field(default_factory=ChangeDetectionConfig)
    contexts: ContextConfig = Field(default_factory=ContextConfig)
    evolution: EvolutionConfig | None = None
    p_best_draws: int = Field(10_000, ge=100, description="Monte Carlo draws for P(best).")

    @model_validator(mode="after")
    def _consistent(self) -> BanditConfig:
        seen: set[str] = set()
        for arm in self.arms:
            if arm.arm_id in seen:
                raise ValueError(f"duplicate arm_id {arm.arm_id!r}; give each arm its own id")
            seen.add(arm.arm_id)
        if self.evolution is not None:
            for arm in self.arms:
                for key, spec in self.evolution.params.items():
                    if key in arm.params:
                        problem = param_problem(spec, arm.params[key])
                        if problem:
                            raise ValueError(f"arm {arm.arm_id!r} param {key!r}: {problem}")
        return self

    def dynamics(self) -> Dynamics:
        cd = self.change_detection
        return Dynamics(
            discount=self.discount,
            window=None if self.window is None else float(self.window),
            detect=cd.method != "none",
            drift=cd.drift,
            threshold=cd.threshold,
            warmup=cd.warmup,
            reset=cd.reset,
        )

    def selection_rule(self) -> SelectionRule:
        return SelectionRule(
            optimistic=self.sampling == "optimistic",
            seed_strength=self.contexts.seed_strength if self.contexts.enabled else 0.0,
        )

    def fingerprint(self) -> str:
        """Hash of everything but storage (which says where, not what)."""
        body = self.model_dump(mode="json", exclude={"storage"})
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def param_problem(spec: FloatParam | IntParam | ChoiceParam, value: Any) -> str:
    """Why ``value`` is outside ``spec``, or an empty string."""
    if isinstance(spec, ChoiceParam):
        return "" if value in spec.choices else f"{value!r} is not one of {spec.choices!r}"
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    if isinstance(spec, IntParam) and not (numeric and float(value).is_integer()):
        return f"{value!r} is not an integer"
    if not numeric or not spec.low <= value <= spec.high:
        return f"{value!r} is outside the declared bounds [{spec.low}, {spec.high}]"
    return ""


def parse_config(name: str, raw: BanditConfig | Mapping[str, Any]) -> BanditConfig:
    """Validate ``raw``; raise one :class:`BanditConfigError` listing every problem."""
    if isinstance(raw, BanditConfig):
        return raw
    try:
        return BanditConfig.model_validate(raw)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            path = "config" + "".join(
                f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"]
            )
            value = "" if err["type"] == "missing" else f" (got {err.get('input')!r})"
            lines.append(f"  {path}: {err['msg']}{value}")
        raise BanditConfigError(
            f"bandit {name!r}: invalid configuration:\n"
            + "\n".join(lines)
            + "\nfix the fields above; see armature_temporal.bandit.BanditConfig for each field"
        ) from None


def context_key(context: Mapping[str, Any] | str | None, keys: list[str] | None = None) -> str:
    """The canonical key of a context: ``''`` for none, else ``k=v`` pairs sorted by field.

    ``keys`` restricts which fields count. Keys longer than 200 characters are hashed.
    """
    if context is None:
        return ""
    if isinstance(context, str):
        key = context
    else:
        items = sorted((str(k), v) for k, v in context.items() if keys is None or str(k) in keys)
        key = ";".join(
            f"{k}={v if isinstance(v, str) else json.dumps(v, sort_keys=True)}" for k, v in items
        )
    if len(key) > _CONTEXT_KEY_MAX:
        return "sha256:" + hashlib.sha256(key.encode()).hexdigest()
    return key
