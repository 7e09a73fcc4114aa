"""Progressive unlocking: a spec stage's bandit starts simple and learns more as data arrives.

The rungs, each with a declared threshold (``armature bandit status SPEC`` shows them, with
when each unlocked):

=============  ==========================================================================
thompson       from the first rewarded decision: Thompson sampling over the spec's arms.
context        per context, once it has ``bandit.context.unlock_after`` (default 10)
               rewarded decisions: from then its own evidence outweighs the global
               posterior it borrows (``seed_strength`` 1, fading as 1 / (1 + own evidence))
               by at least 10 to 1. Before that its choices follow the global posterior.
evolution      once the bandit has ``bandit.evolve.after`` (default 30) rewarded decisions
               over all contexts: maintenance breeds and retires arms (spec_arms.evolve).
fine-tune      once the trace store holds ``finetune.min_examples`` (default 20) distinct
               successful replies of the stage: the fine-tune loop trains an adapter.
sao            as fine-tune, counting preference pairs (a successful and a failed episode
               on the same input): a preference-tuned (DPO) adapter can be trained
               (finetune.method: dpo; the loop counts the same pairs).
=============  ==========================================================================

The bandit rungs are recorded as ``unlocked`` events when a reward crosses the threshold
(:func:`record_unlocks`); the trace-store rungs are dated by the run that crossed it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

from armature_temporal.bandit._models import BanditEvent
from armature_temporal.bandit._runtime import BanditRuntime
from armature_temporal.spec.arm_policy import ArmPolicy

__all__ = ["Rung", "bandit_rungs", "record_unlocks"]

RungName = Literal["thompson", "context", "evolution", "fine-tune", "sao"]
_seen: set[tuple[str, str, str]] = set()
_lock = threading.Lock()


class Rung(BaseModel):
    """One rung of one stage's ladder."""

    model_config = ConfigDict(extra="forbid")

    rung: RungName
    #: unlocked, locked, or off (the spec does not ask for it).
    status: Literal["unlocked", "locked", "off"]
    threshold: str
    progress: str
    unlocked_at: str | None = None
    context: str | None = None


def _crossed(runtime: BanditRuntime, policy: ArmPolicy | None, context: str) -> list[BanditEvent]:
    """The rungs this bandit has crossed (thompson, evolution, this context's) as events."""
    glob = runtime.backend.stats(runtime.name, "")
    total = sum(s.rewarded for s in glob.values())
    out: list[tuple[str, str | None, int]] = []
    if total >= 1:
        out.append(("thompson", None, 1))
    if policy is not None and policy.evolve is not None and total >= policy.evolve.after:
        out.append(("evolution", None, policy.evolve.after))
    if policy is not None and policy.context is not None and context:
        own = runtime.backend.stats(runtime.name, context)
        if sum(s.rewarded for s in own.values()) >= policy.context.unlock_after:
            out.append(("context", context, policy.context.unlock_after))
    return [
        BanditEvent(
            at="",
            kind="unlocked",
            context=ctx,
            detail={"rung": rung, "after": after, "decisions": total},
        )
        for rung, ctx, after in out
    ]


def record_unlocks(
    runtime: BanditRuntime, policy: ArmPolicy | None, context: str, at: str
) -> list[str]:
    """After a reward: log an ``unlocked`` event for each rung crossed for the first time
    (once per bandit, rung and context; this process remembers what it logged). Returns the
    rungs newly logged. Once this process has seen every rung the policy has, a reward costs
    no read at all."""
    possible = {("thompson", "")}
    if policy is not None and policy.evolve is not None:
        possible.add(("evolution", ""))
    if policy is not None and policy.context is not None and context:
        possible.add(("context", context))
    with _lock:
        if all((runtime.name, rung, ctx) in _seen for rung, ctx in possible):
            return []
    crossed = _crossed(runtime, policy, context)
    with _lock:
        fresh = [
            e
            for e in crossed
            if (runtime.name, str(e.detail["rung"]), e.context or "") not in _seen
        ]
    if not fresh:
        return []
    logged = {
        (str(e.detail.get("rung")), e.context or "")
        for e in runtime.events()
        if e.kind == "unlocked"
    }
    new = [
        e.model_copy(update={"at": at})
        for e in fresh
        if (str(e.detail["rung"]), e.context or "") not in logged
    ]
    runtime.backend.log(runtime.name, new)
    with _lock:
        _seen.update((runtime.name, str(e.detail["rung"]), e.context or "") for e in fresh)
    return [str(e.detail["rung"]) for e in new]


def bandit_rungs(
    runtime: BanditRuntime | None, policy: ArmPolicy | None, contexts: Sequence[str] = ()
) -> list[Rung]:
    """The thompson, context and evolution rungs of one stage's bandit (``None``: no run has
    chosen an arm yet)."""
    events = runtime.events() if runtime is not None else []
    unlocked: dict[tuple[str, str], str] = {}
    for e in events:
        if e.kind == "unlocked":
            unlocked.setdefault((str(e.detail.get("rung")), e.context or ""), e.at)
    glob = runtime.backend.stats(runtime.name, "") if runtime is not None else {}
    total = sum(s.rewarded for s in glob.values())

    def rung(name: RungName, threshold: str, need: int, have: int, ctx: str = "") -> Rung:
        at = unlocked.get((name, ctx))
        status: Literal["unlocked", "locked"] = (
            "unlocked" if at is not None or have >= need else "locked"
        )
        return Rung(
            rung=name,
            status=status,
            threshold=threshold,
            progress=f"{have}/{need} rewarded decisions",
            unlocked_at=at,
            context=ctx or None,
        )

    rungs = [rung("thompson", "from the first rewarded decision", 1, total)]
    context = policy.context if policy is not None else None
    if context is None:
        rungs.append(Rung(rung="context", status="off", threshold="no bandit.context", progress=""))
    else:
        keys = sorted(set(contexts) | {c for (n, c) in unlocked if n == "context" and c})
        need = context.unlock_after
        if not keys:
            rungs.append(
                Rung(
                    rung="context",
                    status="locked",
                    threshold=f"{need} rewarded decisions per context",
                    progress="no context has a decision yet",
                )
            )
        for key in keys:
            own = runtime.backend.stats(runtime.name, key) if runtime is not None else {}
            have = sum(s.rewarded for s in own.values())
            rungs.append(rung("context", f"{need} rewarded decisions in it", need, have, key))
    evolve = policy.evolve if policy is not None else None
    if evolve is None:
        rungs.append(
            Rung(rung="evolution", status="off", threshold="no bandit.evolve", progress="")
        )
    else:
        rungs.append(
            rung("evolution", f"{evolve.after} rewarded decisions overall", evolve.after, total)
        )
    return rungs
