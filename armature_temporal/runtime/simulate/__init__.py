"""Armature's offline ``simulate`` provider — a simulator, not a language model.

It exists so that specs can be tried, demos run, and tests and benchmarks executed without
API keys, a network or any cost. Nothing here understands the prompt: it writes output of
the requested shape from the prompt's own words, and each tier's two knobs decide how often
that output is valid (``valid_rate``) and how good it is deemed (``quality``). Text output
starts with ``[simulated]``, and so do free-text JSON fields (``rationale``, ``summary``, …)
where their length limits allow, so no one mistakes it for a real model's answer.

Everything is deterministic in ``seed`` (the caller passes e.g.
``f"{run_id}/{stage}/{attempt}/{tier}"``): the same arguments give the same bytes. The
validity coin and the content come from streams that do not depend on the knobs, so two
tiers given the same seed are coupled: the one with the higher ``valid_rate`` is valid
whenever the other is, which keeps tier comparisons in benchmarks low-noise.

Supported JSON Schema keywords for valid output: ``type`` (one or a list), ``properties``,
``required``, ``additionalProperties``, ``enum``, ``const``, ``minItems``/``maxItems``,
``items``, ``prefixItems``, ``uniqueItems``, ``minLength``/``maxLength``,
``minimum``/``maximum``/``exclusiveMinimum``/``exclusiveMaximum``, ``anyOf``/``oneOf`` (the
first branch that can be satisfied), ``allOf`` (merged), and ``$ref`` to ``#/$defs/…``.
``format`` is ignored; ``pattern`` and other keywords are not honoured, so a schema that
relies on them gets invalid simulated output.
"""

from __future__ import annotations

from armature_temporal.runtime.simulate._completion import (
    QUALITY_CONCENTRATION as QUALITY_CONCENTRATION,
)
from armature_temporal.runtime.simulate._completion import SimulatedCompletion, simulate_completion
from armature_temporal.runtime.simulate._output import DRESSED_SHARE as DRESSED_SHARE
from armature_temporal.runtime.simulate._tools import simulate_tool_turn

__all__ = ["SimulatedCompletion", "simulate_completion", "simulate_tool_turn"]
