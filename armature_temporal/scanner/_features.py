"""Features of a text for the prompt-injection model, shared by training and scanning.

A text becomes a set of binary feature names:

- ``w:<word>`` — a lower-cased word (``\\w+``, any script);
- ``b:<word> <word>`` — two adjacent words;
- ``q:<cue>`` — one of the hand-written :data:`CUES` below matched somewhere in the text.

The model is a logistic regression over these, with each text's vector scaled to unit length;
its weights are learnt by :mod:`armature_temporal.scanner.train` and shipped as JSON.

Character n-grams were tried and dropped: they raised cross-validated recall by about two
points but latched on to fragments of the labelled sets' benign questions, and flagged a third
of a hand-written set of ordinary agent inputs (code requests, tool output, memory notes).
"""

from __future__ import annotations

import itertools
import re

__all__ = ["CUES", "text_features"]

_WORD = re.compile(r"\w+")
_I = re.IGNORECASE

# Cues that an instruction is being overridden, a persona imposed, limits lifted or the prompt
# leaked. Written from the public literature on prompt injection (override, role-play, "DAN"
# jailbreaks, prompt leaking, output forcing, obfuscation), in English and the languages the
# labelled data holds. They are features: the model learns how much each one counts.
CUES: dict[str, re.Pattern[str]] = {
    "override": re.compile(
        r"\b(?:ignore|disregard|forget|skip|drop|abandon|override|bypass|neglect)\b"
        r"(?:\W+\w+){0,4}?\W+(?:previous|prior|above|preceding|earlier|former|all|any|your"
        r"|these|those|everything|initial|original)\b",
        _I,
    ),
    "override_object": re.compile(
        r"\b(?:ignore|disregard|forget|drop|abandon|override|bypass)\b(?:\W+\w+){0,5}?\W+"
        r"(?:instructions?|rules|prompts?|directions|guidelines|orders|commands|tasks"
        r"|assignments|context|documents|articles|programming|restrictions|everything"
        r"|thoughts)\b",
        _I,
    ),
    "override_de": re.compile(
        r"\b(?:ignorier\w*|vergiss|vergessen\s+sie|missachte\w*|überschreib\w*)\b", _I
    ),
    "override_romance": re.compile(
        r"\b(?:olvid[ae]\w*|ignora|ignorar|oubli(?:ez|e)|ignorez|dimentica)\b", _I
    ),
    "new_task": re.compile(
        r"\b(?:new|neue[nr]?|weitere)\s+(?:task|instructions?|aufgaben?|anweisungen"
        r"|assignment)\b|\bnow\s+(?:new\s+)?(?:instructions|tasks)\s+follow|\bnun\s+folgen\b",
        _I,
    ),
    "from_now_on": re.compile(
        r"\bfrom\s+now\s+on\b|\bab\s+(?:jetzt|sofort)\b|\bvon\s+nun\s+an\b|\bhenceforth\b", _I
    ),
    "role_now": re.compile(
        r"\b(?:you\s+are\s+now|now\s+you\s+are|du\s+bist\s+(?:jetzt|nun)|(?:jetzt|nun)\s+bist"
        r"\s+du|you\s+will\s+now\s+(?:act|be|pretend))\b",
        _I,
    ),
    "act_as": re.compile(
        r"\b(?:act|acting)\s+as\b|\bals\s+\w+\s+fungieren\b|\bpretend\s+(?:to\s+be|you|that)\b"
        r"|\bstell\s+dir\s+vor\b|\bimagine\s+(?:you|that\s+you)\b|\brole[\s-]?play\w*\b"
        r"|\bstay\s+in\s+character\b",
        _I,
    ),
    "jailbreak": re.compile(
        r"\b(?:jailbr\w+|do\s+anything\s+now|developer\s+mode|dev\s+mode|unfiltered"
        r"|uncensored|unrestricted|amoral|no\s+(?:ethical|moral)\b)",
        _I,
    ),
    "dan": re.compile(r"\bDAN\b|\bSTAN\b|\bDUDE\b|\bAIM\b"),
    "no_limits": re.compile(
        r"\b(?:no|without|free\s+(?:of|from)|beyond|bypass\w*|break\w*)\s+(?:any\s+)?"
        r"(?:restrictions?|limits?|limitations|filters?|rules|guidelines|boundaries"
        r"|censorship|policies|constraints)\b",
        _I,
    ),
    "policy": re.compile(
        r"\b(?:openai|content)\s+(?:content\s+)?polic(?:y|ies)\b|\bethical\s+guidelines\b"
        r"|\bsafety\s+guidelines\b",
        _I,
    ),
    "leak_prompt": re.compile(
        r"\b(?:show|reveal|print|output|repeat|display|tell|zeige?)\b(?:\W+\w+){0,4}?\W+"
        r"(?:prompt|instructions|system\s+message|prompt-text\w*)\b"
        r"|\bbeginning\s+of\s+this\s+prompt\b",
        _I,
    ),
    "force_output": re.compile(
        r"\b(?:just|only|nur|simply)\s+(?:say|output|print|write|respond|answer|sagen"
        r"|schreibe|ausgeben)\b|\brepeat\s+after\s+me\b|\b(?:say|output|print)\s*:?\s*[\"']",
        _I,
    ),
    "context_attack": re.compile(
        r"\b(?:articles?|documents?|provided\s+context|dokumente\w*)\b(?:\W+\w+){0,3}?\W+"
        r"(?:own\s+knowledge|ignore|disregard)|\bdisregarding\b|\bown\s+knowledge\b",
        _I,
    ),
    "spaced_letters": re.compile(r"(?:\b\w\s){6,}\w\b"),
    "shouting": re.compile(r"\b[A-ZÄÖÜ]{2,}(?:\s+[A-ZÄÖÜ!\"]{2,}){4,}"),
    "escaped_newlines": re.compile(r"(?:\\\s?n\s*){2,}"),
    "zero_width": re.compile("[\u200b\u200c\u200d\u2060\ufeff]"),
    "stop_attention": re.compile(r"\b(?:stop|stopp|attention|achtung)\b\s*[-!:]", _I),
    "praise_then": re.compile(
        r"\b(?:well\s+done|very\s+good|great|excellent|congratulations|gut\s+gemacht"
        r"|sehr\s+gut|ausgezeichnet|super)\b[^.!?]{0,40}[.!?]\s*(?:\w+\W+){0,6}"
        r"(?:now|but|nun|jetzt|aber)\b",
        _I,
    ),
}


def text_features(text: str) -> set[str]:
    """Return the binary feature names of ``text`` (see the module docstring)."""
    words = _WORD.findall(text.lower())
    feats = {"w:" + w for w in words}
    feats.update(f"b:{a} {b}" for a, b in itertools.pairwise(words))
    feats.update("q:" + name for name, rx in CUES.items() if rx.search(text))
    return feats
