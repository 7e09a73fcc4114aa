"""A word-order evaluation set for the semantic cache, built here (PAWS itself is not in the
shared data): pairs of the same words in a different order.

* **Swaps (label 0, different questions)** — hand-written templates whose two slots play
  different roles, filled from fixed lists, the second text with the two fillers swapped
  (``How do I move money from Revolut to Monzo?`` / ``… from Monzo to Revolut?``); and every
  qqp-train text with ``from X to Y`` (X, Y one capitalised word each), the two swapped.
* **Reorders (label 1, the same question)** — templates whose order does not change the
  meaning: the two sides of ``and``/``or``/``vs``, or a phrase moved to the front
  (``In Germany, how do I …?`` / ``How do I … in Germany?``).

Nothing is trained on this set. It was written after the word-order veto
(:func:`armature_temporal.cache.pairs.order_veto`), and half its swap templates use the
constructions the veto names (``from … to``, ``… than …``); the others (``before``,
``cause``, ``instead of``, verbs between two nouns) meet only its same-words-swapped rule.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence

__all__ = ["word_order_pairs"]

_FILL: dict[str, Sequence[str]] = {
    "place": ("France", "Germany", "India", "Canada", "Japan", "Brazil"),
    "bank": ("Revolut", "Monzo", "PayPal", "Chase"),
    "lang": ("Python", "Java", "Rust", "Go", "Haskell"),
    "drug": ("ibuprofen", "paracetamol", "aspirin", "codeine"),
    "animal": ("cat", "dog", "snake", "rabbit", "hawk"),
    "cond": ("stress", "insomnia", "anxiety", "obesity", "depression"),
    "team": ("Arsenal", "Chelsea", "Liverpool", "Barcelona"),
    "unit": ("Celsius", "Fahrenheit", "kelvin"),
}

_SWAPS: tuple[tuple[str, str], ...] = (
    ("bank", "How do I move money from {a} to {b}?"),
    ("place", "What is the cheapest flight from {a} to {b}?"),
    ("lang", "Is {a} faster than {b} for web servers?"),
    ("drug", "Is {a} stronger than {b}?"),
    ("lang", "How do I port a project from {a} to {b}?"),
    ("unit", "How do I convert {a} to {b}?"),
    ("lang", "Should I learn {a} before {b}?"),
    ("drug", "Is it safe to take {a} after {b}?"),
    ("cond", "Does {a} cause {b}?"),
    ("drug", "Can {a} be used instead of {b}?"),
    ("animal", "Can a {a} kill a {b}?"),
    ("team", "Why did {a} beat {b} in the final?"),
    ("place", "Can a citizen of {a} work in {b} without a visa?"),
    ("cond", "Can {a} make {b} worse?"),
)

_REORDERS: tuple[tuple[str, str, str], ...] = (
    (
        "lang",
        "What is the difference between {a} and {b}?",
        "What is the difference between {b} and {a}?",
    ),
    (
        "drug",
        "{a} or {b}: which works better for a headache?",
        "{b} or {a}: which works better for a headache?",
    ),
    ("team", "Who is better, {a} or {b}?", "Who is better, {b} or {a}?"),
    ("lang", "{a} vs {b}, which should I learn?", "{b} vs {a}, which should I learn?"),
    ("place", "In {a}, how do I open a bank account?", "How do I open a bank account in {a}?"),
    ("place", "How do I get a driving licence in {a}?", "In {a}, how do I get a driving licence?"),
    ("cond", "What are the symptoms of {a} and {b}?", "What are the symptoms of {b} and {a}?"),
)

_FROM_TO = re.compile(r"\bfrom ([A-Z][A-Za-z]+) to ([A-Z][A-Za-z]+)\b")


def word_order_pairs(texts: Sequence[str]) -> list[tuple[str, str, int, str]]:
    """``(text_a, text_b, label, source)`` rows; ``texts`` are qqp-train's questions."""
    rows: list[tuple[str, str, int, str]] = []
    for slot, template in _SWAPS:
        for a, b in itertools.combinations(_FILL[slot], 2):
            rows.append((template.format(a=a, b=b), template.format(a=b, b=a), 0, "template"))
    for slot, first, second in _REORDERS:
        pairs = (
            itertools.combinations(_FILL[slot], 2)
            if "{b}" in first
            else ((f, f) for f in _FILL[slot])
        )
        for a, b in pairs:
            rows.append((first.format(a=a, b=b), second.format(a=a, b=b), 1, "template"))
    seen: set[str] = set()
    for text in texts:
        m = _FROM_TO.search(text)
        if m and m.group(1).lower() != m.group(2).lower() and text not in seen:
            seen.add(text)
            swapped = text[: m.start()] + f"from {m.group(2)} to {m.group(1)}" + text[m.end() :]
            rows.append((text, swapped, 0, "qqp from/to"))
    return rows
