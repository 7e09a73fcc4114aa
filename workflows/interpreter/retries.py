"""Retries: infrastructure faults within the stage's deadline, provider failures on a budget.

Two kinds of failure reach an activity, and only one of them is the model's fault:

- **Infrastructure**: the worker running the call died (its heartbeat stops), the call ran past
  its start-to-close timeout, the server restarted. Temporal retries these with no attempt cap
  (:data:`INFRA_RETRY`) until the call's deadline (:func:`deadline`, its schedule-to-close
  timeout); they never use a stage's attempts, so any number of lost workers cannot fail a run.
- **Provider**: the model's provider said no (429, 5xx, 4xx, a local model's error). The
  activity raises these as non-retryable ``ApplicationError`` ``provider_error.<kind>`` whose
  details say whether another try can help; :func:`call_llm` tries again up to
  :data:`PROVIDER_ATTEMPTS` times, sleeping in the workflow between tries (the provider's
  retry-after honoured), then raises :class:`ProviderFailure`, which the stage's ``on_fail``
  counts as one failed attempt. A failure no retry can fix (a missing key, 401, 400) fails
  the stage at once, as before.

Runs started before this change keep the old policies (Temporal's five attempts for every
fault): everything here is behind the :data:`INFRA_RETRIES` patch.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

from armature_temporal.runtime.models import LLMCallInput, LLMCallResult
from workflows.interpreter.failures import StageFailure

__all__ = [
    "DEADLINE_FLOOR",
    "HEARTBEAT",
    "INFRA_RETRIES",
    "INFRA_RETRY",
    "LEGACY_PROVIDER_RETRY",
    "PROVIDER_ATTEMPTS",
    "ProviderFailure",
    "call_llm",
    "deadline",
    "infra_retries",
]

#: workflow.patched id: infrastructure faults retried without an attempt cap within the call's
#: deadline; provider failures counted by the workflow (and by ``on_fail``).
INFRA_RETRIES = "infra-retries-within-deadline"

#: A worker that stops heartbeating for this long is taken for dead and its call retried.
HEARTBEAT = timedelta(seconds=10)

#: Retries of a lost worker, a timeout, a restarting server: no attempt cap; the deadline
#: (schedule-to-close) bounds them. Quick, since the heartbeat timeout already waited.
INFRA_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=500),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=5),
    maximum_attempts=0,
)

#: A call's deadline is this long at least, however short its own timeout.
DEADLINE_FLOOR = timedelta(minutes=30)
#: ... and at least this many times its start-to-close timeout.
DEADLINE_FACTOR = 4

#: Provider failures one model call may have before its attempt counts as failed.
PROVIDER_ATTEMPTS = 5
_PROVIDER_BACKOFF_S = 1.0
_PROVIDER_BACKOFF_MAX_S = 60.0

#: Before :data:`INFRA_RETRIES`: Temporal retried every fault, five attempts in all.
LEGACY_PROVIDER_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(minutes=1),
    maximum_attempts=5,
)


def infra_retries() -> bool:
    """True in runs that retry infrastructure faults without an attempt cap (all new runs)."""
    return workflow.patched(INFRA_RETRIES)


def deadline(start_to_close: timedelta) -> timedelta:
    """The schedule-to-close timeout of a call whose one execution may take ``start_to_close``:
    the time its infrastructure retries may use, all of them together."""
    return max(DEADLINE_FLOOR, start_to_close * DEADLINE_FACTOR)


class ProviderFailure(StageFailure):
    """A model call's provider failed :data:`PROVIDER_ATTEMPTS` times in a row: one failed
    attempt of the stage."""

    def __init__(self, message: str) -> None:
        super().__init__("provider_error", message)


def provider_failure(exc: ActivityError) -> tuple[ApplicationError, bool] | None:
    """``(error, retryable)`` when ``exc`` is a provider failure the activity reported for the
    workflow to count; None for anything else (timeouts, policy, templates)."""
    cause = exc.cause
    if not isinstance(cause, ApplicationError) or not (cause.type or "").startswith(
        "provider_error"
    ):
        return None
    details = cause.details[0] if cause.details else None
    retryable = isinstance(details, dict) and details.get("retryable") is True
    return cause, retryable


async def call_llm(
    inp: LLMCallInput, *, start_to_close: timedelta, summary: str, what: str
) -> LLMCallResult:
    """One model call (``llm_call``): infrastructure faults retried by Temporal within the
    call's deadline, provider failures retried here on the provider's budget.

    Args:
        inp: The call.
        start_to_close: The bound on one execution (the stage's ``timeout``).
        summary: The activity's summary in the Web UI.
        what: Names the call in the sleep summaries (``"draft"``, ``"draft: evaluate"``).

    Raises:
        ProviderFailure: The provider failed on every try.
        ActivityError: Anything else: a provider error no retry can fix (the stage fails),
            a template or policy error, the deadline spent.
    """
    if not infra_retries():
        result: LLMCallResult = await workflow.execute_activity(
            "llm_call",
            inp,
            result_type=LLMCallResult,
            start_to_close_timeout=start_to_close,
            heartbeat_timeout=HEARTBEAT,
            retry_policy=LEGACY_PROVIDER_RETRY,
            summary=summary,
        )
        return result
    inp = inp.model_copy(update={"provider_retries": "workflow"})
    tried = 0
    while True:
        tried += 1
        try:
            result = await workflow.execute_activity(
                "llm_call",
                inp,
                result_type=LLMCallResult,
                start_to_close_timeout=start_to_close,
                schedule_to_close_timeout=deadline(start_to_close),
                heartbeat_timeout=HEARTBEAT,
                retry_policy=INFRA_RETRY,
                summary=summary if tried == 1 else f"{summary}, provider try {tried}",
            )
            return result
        except ActivityError as exc:
            failure = provider_failure(exc)
            if failure is None:
                raise
            error, retryable = failure
            if not retryable:
                # A missing key, a 401, a 400: the same call fails the same way on every try
                # and on every attempt, so the stage fails now, naming the fix, as it always has.
                raise
            if tried >= PROVIDER_ATTEMPTS:
                raise ProviderFailure(
                    f"{error.message} (the provider failed {tried} times in a row)"
                ) from exc
            delay = _provider_delay(tried, error)
            await workflow.sleep(
                delay,
                summary=f"{what}: provider retry in {delay.total_seconds():g}s "
                f"(try {tried + 1} of {PROVIDER_ATTEMPTS})",
            )


def _provider_delay(tried: int, error: ApplicationError) -> timedelta:
    """The provider's retry-after when it gave one, else 1 s doubling up to 60 s."""
    if error.next_retry_delay is not None:
        return error.next_retry_delay
    return timedelta(seconds=min(_PROVIDER_BACKOFF_S * 2 ** (tried - 1), _PROVIDER_BACKOFF_MAX_S))
