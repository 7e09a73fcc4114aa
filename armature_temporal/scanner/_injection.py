"""Prompt injection and jailbreaks: a learnt text model plus a few high-precision rules.

The model (:mod:`._linear`, weights shipped as JSON, loaded on first use) judges the whole
text, so its finding spans the whole text, stripped of surrounding white space: a jailbreak
is a whole prompt, and the caller should quarantine the text rather than cut a sentence out.

The rules fire on their own, wherever they are in the text, with the exact span: the phrases
almost no benign text uses ("ignore all previous instructions", "reveal your system prompt",
chat-template delimiters). They catch an injection buried in a long tool result, where it
would weigh little in the model's whole-text judgement.
"""

from __future__ import annotations

import functools
import re

from armature_temporal.scanner._features import text_features
from armature_temporal.scanner._linear import LinearModel, load_model
from armature_temporal.scanner._models import Finding
from armature_temporal.scanner._rules import Rule, run_rules

__all__ = ["INJECTION_RULES", "detect_injection", "injection_model"]

_I = re.IGNORECASE

_OVERRIDE_VERB = r"(?:ignore|disregard|forget|override|bypass|abandon|discard|drop)"
_OVERRIDE_DET = (
    r"(?:previous|prior|above|preceding|earlier|all|any|your|my|initial|original|system"
    r"|those|these|the\s+above)"
)
_OVERRIDE_OBJ = (
    r"(?:instructions?|prompts?|directions|guidelines|orders|commands|directives|rules"
    r"|context|programming|restrictions|guardrails|system\s+prompt|tasks|assignments)"
)

_SYSTEM = (
    r"(?:system\s+prompt|system\s+(?:message|instructions?)|developer\s+(?:message|instructions?"
    r"|prompt))"
)

INJECTION_RULES: tuple[Rule, ...] = (
    Rule(
        "override-instructions",
        "prompt_injection",
        re.compile(
            rf"\b{_OVERRIDE_VERB}\b(?:\W+\w+){{0,3}}?\W+{_OVERRIDE_DET}\b(?:\W+\w+){{0,2}}?\W+"
            rf"{_OVERRIDE_OBJ}\b",
            _I,
        ),
        0.9,
    ),
    Rule(
        "override-instructions-de",
        "prompt_injection",
        re.compile(
            r"\b(?:ignorier\w*|vergiss|vergessen\s+sie|missachte\w*)\b(?:\W+\w+){0,4}?\W+"
            r"(?:anweisungen|instruktionen|befehle|aufgaben|aufträge|regeln|vorgaben"
            r"|alles\s+(?:davor|vorher|bisherige|gesagte))\b",
            _I,
        ),
        0.9,
    ),
    Rule(
        "override-instructions-es-fr",
        "prompt_injection",
        re.compile(
            r"\b(?:olvida|olvide|olvidad|ignora|oubliez|oublie|ignorez)\b(?:\W+\w+){0,3}?\W+"
            r"(?:instrucciones|instructions|consignes|reglas|règles)\b",
            _I,
        ),
        0.9,
    ),
    Rule(
        "forget-everything",
        "prompt_injection",
        re.compile(
            r"\bforget\s+(?:about\s+)?everything\s+(?:before|above|you\s+know|we\s+(?:discussed|said)"
            r"|i\s+(?:said|told\s+you))\b",
            _I,
        ),
        0.85,
    ),
    Rule(
        "prompt-leak",
        "prompt_injection",
        re.compile(
            r"\b(?:reveal|show|print|output|repeat|display|dump|leak)\b(?:\W+\w+){0,3}?\W+"
            r"(?:your\s+|the\s+)?(?:system\s+prompt|initial\s+prompt|hidden\s+(?:prompt|instructions)"
            r"|original\s+instructions|prompt\s+texts?)\b",
            _I,
        ),
        0.85,
    ),
    Rule(
        "jailbreak-mode",
        "prompt_injection",
        re.compile(
            r"\b(?:DAN\s+Mode|Developer\s+Mode\s+(?:enabled|output)|do\s+anything\s+now"
            r"|jailbreak(?:en)?\s+mode)\b",
            _I,
        ),
        0.9,
    ),
    Rule(
        "chat-template-delimiter",
        "prompt_injection",
        re.compile(
            r"<\|im_start\|>\s*(?:system|developer|assistant)|<\|(?:system|developer)\|>|<<SYS>>"
            r"|\[INST\]|<\|start_header_id\|>"
        ),
        0.8,
    ),
    Rule(
        "system-prompt-claim",
        "prompt_injection",
        re.compile(
            # "The following is the new system prompt", "Updated developer message follows:"
            rf"\b(?:is|are|as)\s+(?:the|your)\s+(?:new|updated|real|true|actual)\s+{_SYSTEM}\b"
            rf"|\b(?:new|updated|revised|real|true|actual|override)\s+{_SYSTEM}\b\s*(?:[:\n]"
            r"|follows\b|below\b)"
            # "This lesson supersedes the system prompt", "The text below replaces your
            # original instructions", "This text is part of your system prompt"
            r"|\b(?:this|these|th(?:is|e|ese)\s+(?:following|text|lesson|message|note|block|lines"
            r"|instructions))(?:\s+below)?\s+(?:supersedes?|replaces?|overrides?|outranks?"
            r"|takes?\s+precedence\s+over|has\s+priority\s+over|is\s+part\s+of)\s+(?:the\s+"
            r"|your\s+|any\s+|all\s+)?(?:previous\s+|prior\s+|original\s+|earlier\s+"
            rf"|existing\s+|current\s+)?(?:{_SYSTEM}|instructions|prompt)\b"
            r"|\b(?:end|begin|start)\s+(?:of\s+)?(?:the\s+)?(?:system\s+prompt|new\s+instructions"
            r"|developer\s+message|real\s+instructions|admin\s+instructions)\b"
            r"|\byour\s+(?:real|true|actual)\s+instructions\b",
            _I,
        ),
        0.8,
    ),
)


@functools.cache
def injection_model() -> LinearModel:
    """The shipped prompt-injection model, loaded once, on first use."""
    return load_model()


def detect_injection(text: str, model: LinearModel | None = None) -> list[Finding]:
    """Prompt-injection findings in ``text``: the model's (whole text) and the rules'."""
    findings = run_rules(text, INJECTION_RULES)
    m = model if model is not None else injection_model()
    score = m.score(text_features(text))
    if score >= 0.5:
        start = len(text) - len(text.lstrip())
        end = len(text.rstrip())
        findings.append(
            Finding(
                category="prompt_injection",
                span=(start, max(start, end)),
                text=text[start:end],
                score=round(score, 4),
                rule="injection-model",
            )
        )
    return findings
