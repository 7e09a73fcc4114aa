"""Seeded randomness and the prompt's vocabulary, from which every simulated string is made."""

from __future__ import annotations

import hashlib
import random
import re

__all__ = ["MARK", "phrase", "rng_for", "sentence", "words_of"]

#: Prefix of simulated text (and of free-text JSON fields where their length allows).
MARK = "[simulated] "

_WORD = re.compile(r"[^\W\d_]{3,}")
_STOPWORDS = frozenset(
    (
        "the",
        "and",
        "for",
        "with",
        "that",
        "this",
        "from",
        "into",
        "your",
        "you",
        "are",
        "was",
        "were",
        "will",
        "would",
        "should",
        "could",
        "have",
        "has",
        "had",
        "not",
        "but",
        "all",
        "any",
        "can",
        "each",
        "its",
        "our",
        "their",
        "them",
        "they",
        "then",
        "than",
        "what",
        "when",
        "which",
        "who",
        "whom",
        "why",
        "how",
        "about",
        "over",
        "under",
        "only",
        "also",
        "just",
        "more",
        "most",
        "some",
        "such",
        "very",
        "json",
        "output",
        "reply",
        "return",
        "given",
        "following",
        "must",
        "please",
        "use",
        "using",
    )
)
_FALLBACK_WORDS = (
    "request",
    "summary",
    "customer",
    "report",
    "detail",
    "result",
    "priority",
    "account",
    "update",
    "review",
)
_TEXT_TEMPLATES = (
    "This response addresses {a} and {b}.",
    "The main point concerns {a}, with attention to {b}.",
    "Considering {a}, the answer notes {b} and {c}.",
    "Next steps: {a}, and a closer look at {b}.",
    "In short, {a} matters most here.",
)


def rng_for(seed: str) -> random.Random:
    """A random stream seeded by the SHA-256 of ``seed`` (stable across processes)."""
    digest = hashlib.sha256(seed.encode("utf-8")).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def words_of(text: str) -> list[str]:
    """Up to 64 distinct non-stopwords of ``text``, padded with stock words when it has few."""
    seen = dict.fromkeys(w.lower() for w in _WORD.findall(text))
    words = [w for w in seen if w not in _STOPWORDS][:64]
    return words if len(words) >= 4 else [*words, *_FALLBACK_WORDS]


def phrase(rng: random.Random, words: list[str]) -> str:
    """A short noun phrase: one to three distinct prompt words, capitalised."""
    text = " ".join(rng.sample(words, min(len(words), rng.randint(1, 3))))
    return text[:1].upper() + text[1:]


def sentence(rng: random.Random, words: list[str]) -> str:
    """One plain sentence built on prompt words."""
    a, b, c = (rng.choice(words) for _ in range(3))
    return rng.choice(_TEXT_TEMPLATES).format(a=a, b=b, c=c)
