"""The ``context:`` section: how an agent's tool loop keeps its window within the model's.

A stage whose role has tools sends the model its prompt and the turns of its tool loop so far.
``context:`` (spec-wide, and per role, the role's fields over the spec's) says what happens when
those turns outgrow the window: the ``keep_recent`` newest turns stay verbatim, older ones are
dropped to one-line stubs (or ``summarize``d by a named tier), ``pin`` rules keep what must
survive, and tool results longer than ``offload_over`` characters are kept out of the window
behind a handle that the built-in ``recall`` tool reads back.

:class:`ContextWindow` is what a spec writes; :class:`PlanContext` is what the compiler puts on
a role in the plan (only where the spec declared ``context:``; without it the interpreter uses
:class:`PlanContext`'s defaults). :func:`context_problems` holds the checks that need the
spec's tiers, stages and prompts (run by :func:`armature_temporal.spec.checks.check_spec`).
armature-agents 0.7.0 had the same two numbers, ``token_budget`` and ``keep_recent``, in an
internal context manager no spec could set (defaults 8000 and 4); the names are kept.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from armature_temporal.errors import did_you_mean
from armature_temporal.spec.fields import _Model

__all__ = [
    "CHARS_PER_TOKEN",
    "DEFAULT_OFFLOAD_OVER",
    "DEFAULT_REPLY_RESERVE",
    "DEFAULT_SEGMENT_TURNS",
    "MAX_TURNS_WITHOUT_CONTEXT",
    "ContextField",
    "ContextWindow",
    "PinRule",
    "PlanContext",
    "compile_context",
    "context_problems",
    "estimate_text_tokens",
]

#: The estimate used where no tokenizer counts (the simulate provider, validate's checks).
CHARS_PER_TOKEN = 4
#: Tool results longer than this (characters of their JSON) are offloaded by default: the
#: 20,000 characters a tool result was cut to before, so results that fit then are unchanged.
DEFAULT_OFFLOAD_OVER = 20_000
#: Tokens kept free for the reply when neither the role nor its tier sets max_tokens.
DEFAULT_REPLY_RESERVE = 1024
#: Turns of a loop one workflow history holds (about 15 KB and 12 events a turn).
DEFAULT_SEGMENT_TURNS = 100
#: The most turns a loop may take with its context policy off (every turn sent whole).
MAX_TURNS_WITHOUT_CONTEXT = 200


def estimate_text_tokens(text: str) -> int:
    """Tokens in ``text`` by the documented estimate: one per four characters, at least one."""
    return len(text) // CHARS_PER_TOKEN + 1


class PinRule(_Model):
    """A rule for context that must survive compaction: the turns that called a tool, or any
    message whose text contains a marker (the model can pin a reply by writing it)."""

    tool: str | None = Field(None, min_length=1, description="Turns calling this tool stay.")
    contains: str | None = Field(
        None, min_length=1, description="Turns with a message containing this text stay."
    )

    @model_validator(mode="after")
    def _one(self) -> PinRule:
        if (self.tool is None) == (self.contains is None):
            raise ValueError("a pin rule names exactly one of tool: or contains:")
        return self


class ContextWindow(_Model):
    """How a tool loop (a role with tools) keeps its window within the model's context. Each
    turn is a model reply that called tools, with their results. Over the budget, the turns
    older than ``keep_recent`` leave the window (pinned ones stay): one message lists them as
    stubs, or a ``summarize`` tier's summary. Every tool result keeps a handle
    (``t<turn>.<call>``) that the built-in ``recall`` tool, offered once something has left
    the window, reads back. ``context: false`` turns it off."""

    enabled: bool = Field(
        True, description="false: no compaction or offloading; every turn is sent whole."
    )
    token_budget: int | None = Field(
        None,
        ge=1,
        description="Tokens the window (prompt and turns) may hold; default: the tier's "
        "context_window, else the model's input size from litellm's model info, less "
        "reply_reserve. Unknown (simulate without context_window): no compaction.",
    )
    reply_reserve: int | None = Field(
        None,
        ge=0,
        description="Tokens left free for the reply (default: the role's or tier's max_tokens, "
        "else 1024).",
    )
    keep_recent: int = Field(
        4, ge=1, le=1000, description="Newest turns always sent verbatim (0.7.0's default, 4)."
    )
    summarize: str | None = Field(
        None,
        description="Tier that summarizes the turns compaction takes out of the window (one "
        "model call per compaction, traced and cached); unset: they become one-line stubs.",
    )
    pin: list[PinRule] = Field(
        default_factory=list, description="Turns that stay in the window whatever their age."
    )
    offload_over: int = Field(
        DEFAULT_OFFLOAD_OVER,
        ge=200,
        le=1_000_000,
        description="Tool results longer than this (characters) stay out of the window: it "
        "keeps a handle with the head and tail, and the built-in recall tool reads the rest.",
    )
    segment_turns: int = Field(
        DEFAULT_SEGMENT_TURNS,
        ge=2,
        le=10_000,
        description="Turns of the loop one workflow history holds: the first segment runs in "
        "the run's own history, the rest in an AgentLoop child workflow that continues as new "
        "every segment (sooner when Temporal suggests it), carrying references only.",
    )


def _shorthand(value: Any) -> Any:
    """``context: false`` / ``true`` for ``{enabled: ...}``."""
    return {"enabled": value} if isinstance(value, bool) else value


ContextField = Annotated[ContextWindow | None, BeforeValidator(_shorthand)]


class PlanContext(BaseModel):
    """A role's resolved ``context:`` in the plan; its defaults are the interpreter's for a
    role with tools whose spec declares none."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    token_budget: int | None = None
    reply_reserve: int | None = None
    keep_recent: int = 4
    summarize: str | None = None
    pin: list[PinRule] = Field(default_factory=list)
    offload_over: int = DEFAULT_OFFLOAD_OVER
    segment_turns: int = DEFAULT_SEGMENT_TURNS


def _merged(spec_wide: ContextWindow | None, own: ContextWindow | None) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for declared in (spec_wide, own):
        if declared is not None:
            values.update({k: getattr(declared, k) for k in declared.model_fields_set})
    return values


def compile_context(
    spec_wide: ContextWindow | None,
    own: ContextWindow | None,
    *,
    has_tools: bool,
    max_tokens: int | None,
) -> PlanContext | None:
    """The plan's context for a role: None where the spec declares none (or the role has no
    tools, so no loop grows); else the role's fields over the spec's, reply_reserve filled."""
    if not has_tools or (spec_wide is None and own is None):
        return None
    values = _merged(spec_wide, own)
    if values.get("reply_reserve") is None:
        values["reply_reserve"] = max_tokens or DEFAULT_REPLY_RESERVE
    return PlanContext(**values)


def context_problems(
    spec: Any, tiers: Sequence[str]
) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """``(path, message)`` for each mistake in the ``context:`` sections of ``spec`` (a
    :class:`~armature_temporal.spec.models.Spec`). What a role's window always carries (its
    description and the spec's mission) is estimated at four characters a token."""
    spec_wide: ContextWindow | None = spec.context
    if spec_wide is not None:
        yield from _own_problems(("context",), spec_wide, tiers)
    for index, stage in enumerate(spec.stages):
        role = stage.role
        if role is None:
            continue
        sid, fixed = stage.id, f"{spec.mission or ''}\n{role.description}"
        path: tuple[str | int, ...] = ("stages", index, "role", "context")
        own: ContextWindow | None = role.context
        if own is not None:
            yield from _own_problems(path, own, tiers)
            if not role.tools:
                yield (
                    path,
                    f"stage {sid!r}: context: applies to a role with tools (its tool loop's "
                    "turns are what it keeps in the window); add tools or remove context",
                )
                continue
        if not role.tools or (spec_wide is None and own is None):
            continue
        values = _merged(spec_wide, own)
        if not values.get("enabled", True) and role.max_turns > MAX_TURNS_WITHOUT_CONTEXT:
            yield (
                ("stages", index, "role", "max_turns"),
                f"stage {sid!r}: max_turns {role.max_turns} needs its context policy, which is "
                f"off: every turn would be sent to the model whole and carried from one workflow "
                f"history to the next; turn context on or keep max_turns at most "
                f"{MAX_TURNS_WITHOUT_CONTEXT}",
            )
        for k, rule in enumerate(values.get("pin", [])):
            if rule.tool is not None and rule.tool not in role.tools:
                where = path if own is not None and "pin" in own.model_fields_set else ("context",)
                yield (
                    (*where, "pin", k, "tool"),
                    f"stage {sid!r}: pin names tool {rule.tool!r}, which its role does not "
                    f"have; its tools: {list(role.tools)}{did_you_mean(rule.tool, role.tools)}",
                )
        budget = values.get("token_budget")
        needed = estimate_text_tokens(fixed)
        if budget is not None and values.get("enabled", True) and budget <= needed:
            where = (
                path if own is not None and "token_budget" in own.model_fields_set else ("context",)
            )
            yield (
                (*where, "token_budget"),
                f"stage {sid!r}: token_budget {budget} does not hold its system prompt and "
                f"task (about {needed} tokens, at {CHARS_PER_TOKEN} characters a token) and "
                "leaves nothing for its turns; raise token_budget or shorten the prompt",
            )


def _own_problems(
    path: tuple[str | int, ...], declared: ContextWindow, tiers: Sequence[str]
) -> Iterator[tuple[tuple[str | int, ...], str]]:
    tier = declared.summarize
    if tier is not None and tier not in tiers:
        yield (
            (*path, "summarize"),
            f"unknown tier {tier!r}; defined tiers: {list(tiers)}{did_you_mean(tier, tiers)}",
        )
