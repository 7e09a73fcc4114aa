"""The tool calls a simulated agent makes, turn by turn."""

from __future__ import annotations

import random
from typing import Any

from armature_temporal.runtime.simulate._values import Generator
from armature_temporal.runtime.simulate._words import rng_for, words_of

__all__ = ["simulate_tool_turn"]


def simulate_tool_turn(
    *, seed: str, turn: int, max_turns: int, tools: list[dict[str, Any]]
) -> list[dict[str, Any]] | None:
    """The tool calls a simulated agent makes on ``turn``, or None to answer now.

    The agent calls tools on its first one or two turns (chosen by ``seed``), never on a turn
    ``>= max_turns - 1``, so the last turn is always left for the answer. Call ids run
    ``call_1``, ``call_2``, … across turns.

    Args:
        seed: The stage attempt's seed; the same for every turn of one conversation.
        turn: 0-based turn number.
        max_turns: The role's ``max_turns``.
        tools: Tool definitions ``{"name", "description", "parameters": JSON Schema}``.

    Returns:
        ``[{"id": "call_<n>", "name": ..., "arguments": {...}}]`` with arguments that match
        the tool's parameters schema, or None.

    Raises:
        ValueError: ``turn`` is negative or a tool has no ``name``.
    """
    if turn < 0:
        raise ValueError(f"turn is 0-based and must not be negative, got {turn}")
    for i, tool in enumerate(tools):
        if not isinstance(tool.get("name"), str):
            raise ValueError(
                f"tools[{i}] has no 'name'; each tool is a dict with 'name', "
                f"'description' and 'parameters' (a JSON Schema)"
            )
    if not tools or turn >= max_turns - 1:
        return None
    tool_turns = 1 if rng_for(f"{seed}/tools").random() < 0.5 else 2
    if turn >= tool_turns:
        return None
    number = sum(_calls_on_turn(rng_for(f"{seed}/tools/{t}")) for t in range(turn))
    rng = rng_for(f"{seed}/tools/{turn}")
    calls: list[dict[str, Any]] = []
    for _ in range(_calls_on_turn(rng)):
        tool = rng.choice(tools)
        schema = tool.get("parameters") or {"type": "object"}
        words = words_of(f"{tool['name'].replace('_', ' ')} {tool.get('description', '')}")
        arguments = Generator(rng, words, schema, invent_keys=False).valid_root()
        number += 1
        calls.append(
            {
                "id": f"call_{number}",
                "name": tool["name"],
                "arguments": arguments if isinstance(arguments, dict) else {},
            }
        )
    return calls


def _calls_on_turn(rng: random.Random) -> int:
    return 2 if rng.random() < 0.25 else 1
