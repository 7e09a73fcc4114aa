"""How a stage's execution is controlled: recovery retries (:class:`OnFail`, :class:`RetryLoop`),
deliberate iteration (:class:`LoopConfig`) and human approval (:class:`Gate`). Importable from
:mod:`armature_temporal.spec.models`."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, model_validator

from armature_temporal.spec.fields import IDENTIFIER, Expression, Seconds, _listify, _Model

__all__ = ["Gate", "LoopConfig", "OnFail", "RetryLoop"]


class RetryLoop(_Model):
    """Recovery loop: retry the stage with the error fed back."""

    max: int = Field(
        3,
        ge=0,
        le=100,
        description="Retries after the first attempt (max: 2 means up to 3 attempts), as in "
        "armature-agents 0.7.0.",
    )
    until: Expression | None = Field(
        None,
        description="Jinja expression over the output (its fields by name, or output); retry "
        "until it is true. The last output is kept when retries run out.",
    )
    backoff_s: Seconds = Field(0.0, description="Wait before the first retry (doubles).")
    backoff_max_s: Seconds | None = Field(None, description="Upper bound on the wait.")
    stage: str | None = Field(
        None,
        description="0.7.0 field: the stage to retry. Only the failing stage itself can be "
        "retried; naming another stage is reported by validate.",
    )
    context: Literal["retry"] = Field(
        "retry",
        description="0.7.0 field: the retry's context mode; 'retry' (the error and attempt "
        "number are fed back as _last_error and _retry_attempt) is the only mode.",
    )


class OnFail(_Model):
    """What to do when a stage's output is invalid or its call fails."""

    loop: RetryLoop | None = Field(None, description="Retry with the error fed back.")
    escalate: bool | None = Field(
        None,
        description="After the loop is spent, move one tier up the ladder and try again. "
        "Default: on for guided_json stages (when a higher tier exists), off otherwise.",
    )


class LoopConfig(_Model):
    """Deliberate iteration: run the stage repeatedly, refining its own output."""

    max_iterations: int = Field(
        10, ge=1, le=1000, description="Upper bound on iterations, the first included."
    )
    until: Expression | None = Field(
        None,
        description="Jinja expression evaluated after each iteration over the output "
        "(e.g. 'output.score >= 0.9', or a field by name); true stops the loop.",
    )
    carry_forward: Annotated[list[str] | None, BeforeValidator(_listify)] = Field(
        None,
        description="Output fields passed to the next iteration (by name, and under "
        "_iteration.carry_forward); omitted: the whole output.",
    )
    iteration_var: str = Field(
        "_iteration",
        pattern=IDENTIFIER.pattern,
        description="Template variable holding num, is_first, is_last and carry_forward.",
    )
    backoff_s: Seconds = Field(0.0, description="Wait before the second iteration (doubles).")
    backoff_max_s: Seconds = Field(60.0, description="Upper bound on the wait.")


class Gate(_Model):
    """A durable human approval. ``gate: human`` is short for ``{type: human}``."""

    type: Literal["human"] = Field("human", description="The only gate type: a person decides.")
    message: str | None = Field(
        None, description="Jinja template shown to the approver (can quote stage outputs)."
    )
    timeout: Seconds | None = Field(
        None, description="How long to wait ('2d', '30m', seconds); none waits forever."
    )
    on_timeout: Literal["approve", "reject", "fail"] = Field(
        "fail", description="What happens when the timeout passes."
    )
    on_reject: Literal["stop", "continue"] | None = Field(
        None,
        description="stop: a rejection ends the run (state rejected); continue: the stage "
        "completes with approved: false and its dependents run and can branch on it. "
        "Default: continue when a condition or skip_if reads this stage, else stop.",
    )

    @model_validator(mode="after")
    def _timeout_policy_needs_timeout(self) -> Gate:
        if "on_timeout" in self.model_fields_set and self.timeout is None:
            raise ValueError("on_timeout needs a timeout, e.g. timeout: 2d")
        return self
