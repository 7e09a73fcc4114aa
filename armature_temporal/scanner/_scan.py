"""``scan``: run every detector over a text; ``redact``: cut the findings out of it."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Literal

from armature_temporal.scanner._conduct import CONDUCT_RULES
from armature_temporal.scanner._encoded import MAX_DEPTH, Budget, encoded_runs
from armature_temporal.scanner._injection import detect_injection
from armature_temporal.scanner._lesson import LESSON_RULES
from armature_temporal.scanner._linear import LinearModel
from armature_temporal.scanner._models import (
    CATEGORIES,
    MASKED_CATEGORIES,
    Category,
    Finding,
    ScanResult,
    mask,
)
from armature_temporal.scanner._personal import PERSONAL_RULES
from armature_temporal.scanner._rules import Rule, run_rules
from armature_temporal.scanner._secrets import detect_secrets

__all__ = ["Profile", "redact", "scan", "scan_many"]

Profile = Literal["input", "lesson"]
"""What kind of text is scanned: ``input`` (anything about to enter a prompt: a tool result, a
retrieved page, a refiner proposal) or ``lesson`` (a heuristic of the experience memory, held
to the stricter rules of :mod:`._lesson` as well)."""

_ORDER = {c: i for i, c in enumerate(CATEGORIES)}


def scan(text: str, *, model: LinearModel | None = None, profile: Profile = "input") -> ScanResult:
    """Scan one text that is about to enter a prompt.

    Looks for prompt injection and jailbreaks, score manipulation, tool misuse, scope
    overreach, secrets and personal data. Pure and offline: no network, no clock, no
    randomness; the injection model's weights are read from the package on first use.

    Args:
        text: The text, as it would be placed in the prompt.
        model: A prompt-injection model to use instead of the shipped one (tests,
            benchmarks).
        profile: ``lesson`` adds the rules for lesson text (judge-directed text, role
            headers and other system-prompt forms, secrets asked into the output), on the
            text and on what its encoded runs decode to.

    Returns:
        A :class:`ScanResult`; ``flagged`` is true when anything was found. What to do
        about a finding (quarantine, :func:`redact`, block) is the caller's decision.
    """
    rules = CONDUCT_RULES + LESSON_RULES if profile == "lesson" else CONDUCT_RULES
    findings = _findings(text, model, rules, 1, Budget())
    findings.sort(key=lambda f: (f.span[0], _ORDER[f.category], -f.score, f.span[1], f.rule))
    return ScanResult(flagged=bool(findings), findings=findings)


def _findings(
    text: str, model: LinearModel | None, rules: tuple[Rule, ...], depth: int, budget: Budget
) -> list[Finding]:
    """Every detector over ``text``, then over what its base64 / hex runs decode to (down to
    ``MAX_DEPTH`` levels, within ``budget``), those findings moved onto the encoded run."""
    findings: list[Finding] = detect_injection(text, model)
    findings.extend(run_rules(text, rules))
    secrets, _ = detect_secrets(text)
    findings.extend(secrets)
    findings.extend(f for f in run_rules(text, PERSONAL_RULES) if not _inside_any(f, secrets))
    decoded: list[Finding] = []
    if depth <= MAX_DEPTH:
        for run in encoded_runs(text, budget):
            for f in _findings(run.decoded, model, rules, depth + 1, budget):
                if any(
                    o.category == f.category and run.start <= o.span[0] and o.span[1] <= run.end
                    for o in findings
                ):
                    continue  # the run itself was already found as this
                encoding = run.encoding if f.encoding is None else f"{run.encoding}>{f.encoding}"
                decoded.append(
                    f.model_copy(update={"span": (run.start, run.end), "encoding": encoding})
                )
    # Mask what the decoded findings hide too: an encoded key is still the key.
    return _mask_inside(text, findings, decoded) + decoded


def scan_many(
    texts: Iterable[str], *, model: LinearModel | None = None, profile: Profile = "input"
) -> list[ScanResult]:
    """:func:`scan` each text, in order."""
    return [scan(t, model=model, profile=profile) for t in texts]


def redact(
    text: str,
    result: ScanResult,
    *,
    categories: Collection[Category] | None = None,
    template: str = "[REDACTED:{category}]",
) -> str:
    """Replace the spans of ``result``'s findings in ``text`` with a marker.

    Overlapping or touching spans are merged into one marker, named after the category
    that comes first in :data:`CATEGORIES` order.

    Args:
        text: The text that was scanned (the spans index into it).
        result: What :func:`scan` returned for ``text``.
        categories: Only redact findings of these categories (default: all). Redacting a
            ``prompt_injection`` model finding removes the whole text: quarantine it instead.
        template: The marker; ``{category}`` is filled in.

    Raises:
        ValueError: A span lies outside ``text``, so ``result`` is not ``text``'s.
    """
    wanted = [f for f in result.findings if categories is None or f.category in categories]
    for f in wanted:
        if f.span[1] > len(text):
            raise ValueError(
                f"finding {f.rule!r} spans {list(f.span)} but the text has {len(text)} "
                "characters; pass the same text that was scanned"
            )
    merged: list[tuple[int, int, Category]] = []
    for f in sorted(wanted, key=lambda f: f.span):
        start, end = f.span
        if merged and start <= merged[-1][1]:
            last_start, last_end, last_cat = merged[-1]
            cat = min(last_cat, f.category, key=_ORDER.__getitem__)
            merged[-1] = (last_start, max(last_end, end), cat)
        else:
            merged.append((start, end, f.category))
    out: list[str] = []
    pos = 0
    for start, end, cat in merged:
        out.append(text[pos:start])
        out.append(template.format(category=cat))
        pos = end
    out.append(text[pos:])
    return "".join(out)


def _mask_inside(
    text: str, findings: list[Finding], also: list[Finding] | None = None
) -> list[Finding]:
    """Mask secret and personal values (of ``findings`` and ``also``) inside ``findings``'
    ``text`` (a model finding spans the whole text, secrets included), so no finding repeats
    a sensitive value."""
    hidden = sorted(f.span for f in [*findings, *(also or [])] if f.category in MASKED_CATEGORIES)
    if not hidden:
        return findings
    out: list[Finding] = []
    for f in findings:
        start, end = f.span
        inner = [(a, b) for a, b in hidden if a < end and b > start]
        if f.category in MASKED_CATEGORIES or not inner:
            out.append(f)
            continue
        parts: list[str] = []
        pos = start
        for a, b in inner:
            a, b = max(a, start), min(b, end)
            if a < pos:  # overlapping hidden spans: mask the rest of this one
                a = pos
            if b <= a:
                continue
            parts.append(text[pos:a])
            parts.append(mask(text[a:b]))
            pos = b
        parts.append(text[pos:end])
        out.append(f.model_copy(update={"text": "".join(parts)}))
    return out


def _inside_any(f: Finding, others: list[Finding]) -> bool:
    """True when ``f``'s span lies within one of ``others`` (an e-mail inside a URL secret)."""
    return any(o.span[0] <= f.span[0] and f.span[1] <= o.span[1] for o in others)
