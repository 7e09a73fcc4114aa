"""The simulator's declared confidence: hedged outputs, stated confidence and token logprobs.

- A tier's ``hedge_rate`` is the chance an output hedges (its own coin, from a stream keyed by
  the seed only). A hedged output loses :data:`HEDGE_PENALTY` of latent quality and carries a
  hedging sentence (text output; JSON: appended to a free-text string where the schema takes
  one).
- An output whose schema has a ``confidence`` or ``certainty`` number states
  ``clip(latent + N(0, STATED_SD))``, scaled to the property's range: lower latent quality,
  lower stated confidence (hedged outputs included, through their penalty).
- A tier with ``logprobs: true`` returns per-token logprobs whose geometric-mean probability is
  ``clip(LOGPROB_BASE + LOGPROB_SLOPE * latent + N(0, LOGPROB_SD), 0.02, 0.995)``, each token
  jittered around it.
"""

from __future__ import annotations

import math
import random
from typing import Any

from armature_temporal.runtime.simulate._values import Generator, conforms
from armature_temporal.runtime.simulate._words import rng_for

__all__ = [
    "HEDGE_PENALTY",
    "LOGPROB_BASE",
    "LOGPROB_SD",
    "LOGPROB_SLOPE",
    "STATED_SD",
    "hedge_sentence",
    "hedges",
    "simulated_logprobs",
    "with_stated_confidence",
]

#: Latent quality a hedged output loses.
HEDGE_PENALTY = 0.25
#: Noise of a stated confidence around the output's latent quality.
STATED_SD = 0.1
#: Simulated logprobs: geometric-mean token probability = base + slope * latent (+ noise).
LOGPROB_BASE = 0.5
LOGPROB_SLOPE = 0.45
LOGPROB_SD = 0.05
#: The most tokens whose logprobs are returned.
MAX_LOGPROB_TOKENS = 256

_HEDGES = (
    "I am not sure about {a}, so this may be wrong.",
    "It might be {a}, but I could be mistaken about {b}.",
    "Perhaps {a} applies here? It is hard to say without more information.",
    "I think it is probably {a}, though I cannot be certain.",
    "This is my best guess about {a}; you may want to double-check {b}.",
)


def hedges(seed: str, hedge_rate: float) -> bool:
    """Whether this call's output hedges: its own coin, so with one seed a tier of higher
    ``hedge_rate`` hedges whenever one of lower rate does."""
    return rng_for(f"{seed}/hedge").random() < hedge_rate


def hedge_sentence(seed: str, words: list[str]) -> str:
    """The hedging sentence a hedged output carries, made of the prompt's words."""
    rng = rng_for(f"{seed}/hedge-words")
    template = rng.choice(_HEDGES)
    pick = words or ["this"]
    return template.format(a=rng.choice(pick), b=rng.choice(pick))


def with_stated_confidence(value: Any, schema: Any, seed: str, latent: float) -> Any:
    """``value`` with its ``confidence``/``certainty`` numbers set to the declared stated
    confidence ``clip(latent + N(0, STATED_SD))``, scaled to each property's bounds (none
    given: [0, 1] for numbers, 0–100 for integers); kept only where the schema accepts it."""
    if not isinstance(value, dict) or not isinstance(schema, dict):
        return value
    props = Generator(random.Random(0), [], schema).resolve(schema).get("properties", {})
    stated = min(1.0, max(0.0, latent + rng_for(f"{seed}/stated").gauss(0.0, STATED_SD)))
    out = dict(value)
    for key in ("confidence", "certainty"):
        sub = props.get(key)
        if key not in out or not isinstance(sub, dict):
            continue
        kind = sub.get("type")
        if kind not in ("number", "integer"):
            continue
        low = float(sub.get("minimum", 0.0))
        high = float(sub.get("maximum", 100.0 if kind == "integer" else 1.0))
        scaled = low + stated * (high - low)
        candidate = {**out, key: round(scaled) if kind == "integer" else round(scaled, 3)}
        if conforms(candidate, schema):
            out = candidate
    return out


def simulated_logprobs(seed: str, latent: float, tokens: int) -> list[float]:
    """Per-token logprobs of an output of latent quality ``latent`` (at most
    :data:`MAX_LOGPROB_TOKENS` of them): around ``log(p)`` for the declared ``p``."""
    rng = rng_for(f"{seed}/logprobs")
    p = LOGPROB_BASE + LOGPROB_SLOPE * latent + rng.gauss(0.0, LOGPROB_SD)
    centre = math.log(min(0.995, max(0.02, p)))
    n = max(1, min(tokens, MAX_LOGPROB_TOKENS))
    jitter = [rng.gauss(0.0, 0.05) for _ in range(n)]
    mean = sum(jitter) / n
    return [round(min(0.0, centre + j - mean), 5) for j in jitter]
