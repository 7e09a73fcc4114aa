"""The commented starter spec that ``armature new`` writes."""

from __future__ import annotations

import json
import re
import shlex

__all__ = ["STARTER_SPEC", "starter_spec"]

STARTER_SPEC = """\
# An Armature workflow spec. Validate it, look at the plan, run it:
#
#   armature validate __FILE__
#   armature plan __FILE__
#   armature submit __FILE__ --wait --input question="What is Temporal?"
#
# Field reference: the README's "Spec language" section, or `armature schema` for your editor.
name: __NAME__
version: 1
description: Answer a question, then check the answer.

# Run inputs as a JSON Schema (or simply a list of names: inputs: [question]).
inputs:
  type: object
  properties:
    question: {type: string, default: What does a durable workflow engine do?}

# Tiers, smallest first. `simulate` runs offline with no key; swap in a real provider, e.g.
#   small: {provider: openai, model: gpt-4o-mini, api_key_env: OPENAI_API_KEY}
model_tiers:
  small: {provider: simulate, valid_rate: 0.9, quality: 0.7}
  frontier: {provider: simulate, quality: 0.9}

stages:
  - id: answer
    role:
      name: Assistant
      type: worker                  # worker | orchestrator | judge | researcher
      description: |
        Answer briefly: {{ inputs.question }}
    output_mode: json
    output_schema:
      type: object
      properties:
        answer: {type: string}
      required: [answer]
    on_fail:
      loop: {max: 3}                # retry invalid output with the error fed back
      escalate: true                # then move up to the next tier

  - id: check
    depends_on: [answer]
    role:
      name: Checker
      type: judge                   # returns {score: 0..1, rationale}
      description: |
        Is this a correct, clear answer to "{{ inputs.question }}"?
        {{ answer.answer }}
"""


#: A plain YAML scalar that would not load as a string: a number, a boolean, null, a date.
_NOT_TEXT = re.compile(
    r"^(?:[-+]?(?:\d[\d_]*)?\.?\d[\d_]*(?:[eE][-+]?\d+)?|0[xXoObB][0-9a-fA-F_]+|"
    r"(?:true|false|yes|no|on|off|y|n|null|~)|\d{4}-\d\d?-\d\d?.*|[-+]?\.(?:inf|nan))$",
    re.IGNORECASE,
)


def starter_spec(filename: str) -> str:
    """The starter spec text, named after ``filename``'s stem (quoted where YAML would read
    the name as a number or a boolean: ``123.yaml`` is named ``"123"``); the commands in its
    comments quote the file name as a shell would need it."""
    stem = filename.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", stem).strip("-.") or "my-workflow"
    if not name[0].isalnum():
        name = "w" + name
    name = name[:100]
    scalar = json.dumps(name) if _NOT_TEXT.match(name) else name
    return STARTER_SPEC.replace("__NAME__", scalar).replace("__FILE__", shlex.quote(filename))
