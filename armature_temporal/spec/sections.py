"""The spec's sections besides stages and tiers: the run's contract and inputs, continuation,
triggers, the learning loops, memory, tool modules, skills, agents, context layers and policy,
HQS weights; and the stage parts they share (signature, adapters, context
policy). Most came from armature-agents 0.7.0 (see specs/migrating.md). The safety
policy's sections live in :mod:`armature_temporal.spec.safety`."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Field,
    model_validator,
)

from armature_temporal.spec.fields import (
    IDENTIFIER,
    KeysMapping,
    Seconds,
    StrList,
    _Model,
)


class Signature(_Model):
    """What a stage reads and writes, by name (armature-agents 0.7.0)."""

    input: KeysMapping = Field(
        default_factory=dict,
        description="Context keys (run inputs, upstream stage ids) this stage sees; the rest "
        "of the accumulated context is hidden from it. Empty: all of it.",
    )
    output: KeysMapping = Field(
        default_factory=dict,
        description="Output keys with their meaning; listed in the prompt as what to return.",
    )


class ToolCall(_Model):
    """A stage that calls one tool directly, with no model."""

    name: str = Field(..., min_length=1, description="Built-in tool name or module:function.")
    args: dict[str, Any] = Field(
        default_factory=dict, description="Arguments; string values are Jinja templates."
    )


class Adapter(_Model):
    """A script or Python function a stage runs (``adapter: name``), as an activity."""

    name: str | None = Field(None, description="Defaults to its key under adapters.")
    type: Literal["script", "python"] = Field(..., description="script or python.")
    cmd: str | list[str] | None = Field(
        None,
        description="script: the command, as a string (split like a shell would, then run "
        "without a shell) or an argv list; each part is a Jinja template over the context.",
    )
    shell: bool = Field(
        False,
        description="script: run cmd through /bin/sh -c (pipes, globs). Off by default: the "
        "safety rules match the argv that runs, and a shell would hide it.",
    )
    fn: str | None = Field(None, description="python: module:function (or module.function).")
    args: dict[str, Any] = Field(
        default_factory=dict,
        description="python: keyword arguments; string values are Jinja templates.",
    )
    timeout: Seconds = Field(60.0, description="Bound on one run of the adapter.")
    parse: Literal["json"] | None = Field(
        None,
        description="script: json parses stdout as a JSON object (exit 0 required) instead of "
        "returning {stdout, stderr, exit_code}.",
    )

    @model_validator(mode="after")
    def _check_type_fields(self) -> Adapter:
        if self.type == "script" and not self.cmd:
            raise ValueError("a script adapter needs cmd, e.g. cmd: python3 tools/fetch.py")
        if self.type == "python" and not self.fn:
            raise ValueError("a python adapter needs fn, e.g. fn: my_pkg.tasks:fetch")
        if self.type == "python" and (self.cmd is not None or self.shell or self.parse):
            raise ValueError("cmd, shell and parse belong to script adapters; remove them")
        if self.type == "script" and self.fn is not None:
            raise ValueError("fn belongs to python adapters; remove it or set type: python")
        return self


class ContextPolicy(_Model):
    """Which context layers a prompt must carry and which keys it must never see."""

    must: StrList = Field(
        default_factory=list, description="context_layers names put into the prompt."
    )
    never: StrList = Field(
        default_factory=list,
        description="Context keys (run inputs, stage ids, layer names) the stage never sees.",
    )


def _carry_list(value: Any) -> Any:
    """The list forms of ``carry_forward`` → ``{name: stage.field}``: ``stage.field`` strings
    and 0.7.0's ``{key: stage.field}`` items are carried under the field's name; ``{name:
    stage.field}`` items (the design documents' "key: <stage>.<field> pairs") under ``name``."""
    if not isinstance(value, list):
        return value
    out: dict[str, Any] = {}
    for item in value:
        if isinstance(item, dict) and len(item) == 1 and "key" not in item:
            ((name, ref),) = item.items()
            if not isinstance(ref, str):
                raise ValueError(
                    f"carry_forward item {item!r}: {name!r} must name a stage.field string"
                )
        else:
            ref = item.get("key") if isinstance(item, dict) and set(item) == {"key"} else item
            if not isinstance(ref, str):
                raise ValueError(
                    f"carry_forward items are stage.field strings, {{name: stage.field}} or "
                    f"{{key: stage.field}}, got {item!r}"
                )
            name = ref.rpartition(".")[2] or ref
        if name in out:
            raise ValueError(
                f"carry_forward carries {name!r} twice ({out[name]!r} and {ref!r}); give one "
                "of them another name: {other_name: stage.field}"
            )
        out[str(name)] = ref
    return out


class Continuation(_Model):
    """Values carried from the latest completed run of this spec into the next."""

    carry_forward: Annotated[dict[str, str], BeforeValidator(_carry_list)] = Field(
        default_factory=dict,
        description="key: stage.field pairs to carry; also a list of {key: stage.field} "
        "pairs, or of stage.field items, each carried under its field's name.",
    )
    inject_as: str = Field(
        "prior_run", pattern=IDENTIFIER.pattern, description="Template variable name."
    )


class Trigger(_Model):
    """Starts runs without a person: a cron schedule or a webhook."""

    type: Literal["cron", "webhook"] = Field(..., description="cron or webhook.")
    schedule: str | None = Field(None, description="cron only: five-field cron expression.")
    path: str | None = Field(None, description="webhook only: URL path, e.g. /hooks/triage.")
    inputs: dict[str, Any] = Field(
        default_factory=dict, description="Run inputs for triggered runs."
    )

    @model_validator(mode="after")
    def _check_type_fields(self) -> Trigger:
        if self.type == "cron" and not self.schedule:
            raise ValueError("a cron trigger needs schedule, e.g. schedule: '0 9 * * 1-5'")
        if self.type == "webhook" and not self.path:
            raise ValueError("a webhook trigger needs path, e.g. path: /hooks/triage")
        if self.type == "cron" and self.path is not None:
            raise ValueError("path belongs to webhook triggers; remove it")
        if self.type == "webhook" and self.schedule is not None:
            raise ValueError("schedule belongs to cron triggers; remove it")
        return self


class SelfImprovement(_Model):
    """The improvement loop: propose verified spec changes from traces."""

    editable_surfaces: StrList = Field(
        default_factory=list,
        description="What it may change: stage_id.description, stage_id.model_tier, "
        "stage_id.temperature, stage_id.max_tokens, and knowledge.sources (enrichment: "
        "documents from knowledge.candidates).",
    )
    target_hqs: float = Field(0.9, ge=0, le=1, description="HQS at which it stops proposing.")
    min_traces: int = Field(20, ge=1, description="Runs needed before it proposes anything.")
    schedule: str = Field("0 3 * * *", description="Cron schedule of the improvement loop.")
    drift_threshold: float = Field(
        0.2,
        ge=0,
        le=1,
        description="A round runs even at target_hqs when the drift score (share of the "
        "current failures that an applied change had been verified to fix) is above this.",
    )
    verify_runs: int = Field(
        10,
        ge=2,
        le=100,
        description="Recent inputs each candidate and the current spec are run on to verify "
        "a change (paired HQS).",
    )
    auto_apply: bool = Field(
        False,
        description="At the end of a round, write the best verified auto-lane change (a "
        "role's description, temperature or max_tokens, a timeout_s, a retry limit) into the "
        "spec file by itself. Review-lane changes (stages, gates, safety, schemas, tools, "
        "depends_on, tiers, anything else) never apply themselves: they go to "
        "<spec>.pending.yaml for `armature improve SPEC --apply-pending`.",
    )
    noninferiority_margin: float = Field(
        0.02,
        ge=0,
        le=0.5,
        description="HQS a cost-saving change (a tier down the ladder, a smaller max_tokens) "
        "may lose: it verifies when the Holm-adjusted interval's low end is above minus this "
        "and its paired cost per run falls.",
    )
    refiner_tier: str | None = Field(
        None,
        description="Tier of the LLM refiner, which reads the diagnosis, the worst runs' "
        "transcripts and the improvement history and proposes changes beside the rule-based "
        "ones (a simulate tier works offline). Unset: improve rounds use the rules only, and "
        "`armature optimize` uses the spec's highest tier.",
    )
    refiner_proposals: int = Field(
        3,
        ge=1,
        le=10,
        description="Most refiner proposals verified per round, at most one per stage field "
        "and distinct fields first.",
    )
    cases: str | None = Field(
        None,
        min_length=1,
        description="A cases file (`armature eval`'s format; relative to the spec's folder, "
        "inside its tree) that every round also runs the current spec and each candidate on, "
        "each case `repeat` times (default 3) with shared noise: a candidate that breaks a case "
        "beyond its noise is not verified, and every proposal lists the cases it fixed and "
        "broke. With search_runs, the cases are also what the frontier search scores.",
    )
    search_runs: int = Field(
        0,
        ge=0,
        le=10_000,
        description="Budget, in case runs, of a reflective frontier search over the cases "
        "(needs cases; runs in `armature optimize` rounds, and in improve rounds when "
        "refiner_tier is set): versions best on some case are kept, the refiner is shown a "
        "frontier version's failing cases and proposes a child of it, two versions that win "
        "different cases are merged, and the search stops when the next candidate would "
        "overspend the budget, when one version passes every case, or when three tries in a "
        "row make nothing new. Its candidates left on the frontier are verified with the "
        "round's. 0: no search.",
    )


class FinetuneConfig(_Model):
    """The fine-tune loop: distil traces into LoRA adapters for a small model."""

    schedule: str = Field("0 4 * * 0", description="Cron schedule of the fine-tune loop.")
    base_model: str = Field(
        ...,
        min_length=1,
        description="Local directory of the base transformers model (relative to the spec's "
        "directory, or absolute); nothing is downloaded.",
    )
    target_stages: StrList = Field(
        default_factory=list,
        description="LLM stages whose successful replies train an adapter each (default: all).",
    )
    method: Literal["sft", "dpo"] = Field(
        "sft",
        description="How adapters are trained. sft: on the stage's distinct successful "
        "replies (supervised). dpo: preference tuning (SAO) with the DPO loss on preference "
        "pairs from the traces — a successful and a failed attempt sent the same messages, or "
        "two valid replies a judge scored differently; trained on top of the stage's SFT "
        "adapter (its newest verified one, or one the round trains first when the stage has "
        "min_examples successful replies), frozen as the reference policy, else from the base "
        "model; verified by held-out preference accuracy above its reference's 50% and by "
        "paired runs whose interval shows the spec better with it (not merely no worse).",
    )
    min_examples: int = Field(
        20,
        ge=2,
        description="Distinct successful replies (method sft) or preference pairs (method "
        "dpo) a stage needs before it is trained.",
    )
    max_steps: int = Field(100, ge=1, le=100_000, description="Optimiser steps per adapter.")
    lora_rank: int = Field(8, ge=1, le=256, description="LoRA rank (r) of the adapters.")
    use_dora: bool = Field(
        False,
        description="Train DoRA adapters (peft's use_dora): each adapted weight is split into a "
        "magnitude vector and a direction, the low-rank update moves the direction and the "
        "magnitudes are trained too (the adapter keeps one magnitude vector per adapted layer).",
    )
    continual: bool = Field(
        False,
        description="Continual adapters (C-LoRA): a stage that already has a verified adapter "
        "on this base_model keeps it frozen (merged into the base weights) and trains only a "
        "new delta adapter on top, initialised to zero (its B matrices start at 0) and kept "
        "away from the frozen adapter's input subspace by orthogonality_weight; the new "
        "adapter's directory holds the frozen one under frozen/, and provider: local serves "
        "both stacked. Without an earlier verified adapter a stage trains as usual.",
    )
    orthogonality_weight: float = Field(
        1.0,
        ge=0,
        le=1000,
        description="With continual: weight of the orthogonality penalty added to the "
        "training loss, the sum over adapted layers of ||A_frozen · A_newᵀ||_F² (squared "
        "Frobenius overlap of the two adapters' LoRA A matrices, i.e. of the input directions "
        "they read). Larger keeps more of the earlier task and learns less of the new one "
        "(benchmarks/adapters_continual.py, tiny model: 1.0 cut the forgetting of task A by a "
        "third for a 6% smaller gain on task B). 0: no penalty (the delta is only "
        "zero-initialised).",
    )
    eval_share: float = Field(
        0.2,
        gt=0,
        lt=1,
        description="Share of a stage's distinct examples held out (by a hash, never trained "
        "on) to measure the reply loss with and without the adapter; their runs' inputs are "
        "the paired runs' inputs, and an adapter needs 5 of them to be verified.",
    )
    noninferiority_margin: float = Field(
        0.02,
        ge=0,
        le=0.5,
        description="HQS the spec may lose with an adapter: the stage served by base_model plus "
        "the adapter is verified when, on the held-out inputs, the Holm-adjusted interval of "
        "its paired HQS difference against the spec as it is has its low end above minus this.",
    )


_TYPE_NAMES = {
    "str": "string",
    "string": "string",
    "text": "string",
    "int": "integer",
    "integer": "integer",
    "float": "number",
    "number": "number",
    "bool": "boolean",
    "boolean": "boolean",
    "list": "array",
    "array": "array",
    "dict": "object",
    "object": "object",
}


_INPUT_ITEM_KEYS = {"name", "type", "description", "required", "default", "enum"}


def _inputs_shorthand(value: Any) -> Any:
    """``inputs: [a, b]`` is a JSON Schema object with those (required) properties; the 0.7.0
    list of ``{name, type, description, required, default}`` is one whose items are required
    only when they say ``required: true``."""
    if not isinstance(value, list):
        return value
    if all(isinstance(v, str) for v in value):
        return {
            "type": "object",
            "properties": {name: {} for name in value},
            "required": list(value),
        }
    properties: dict[str, Any] = {}
    required: list[str] = []
    for item in value:
        if isinstance(item, str):
            properties[item] = {}
            required.append(item)
            continue
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise ValueError(f"each input is a name or {{name, type, description}}; got {item!r}")
        unknown = set(item) - _INPUT_ITEM_KEYS
        if unknown:
            raise ValueError(
                f"input {item['name']!r} has unknown key(s) {sorted(unknown)}; allowed: "
                f"{sorted(_INPUT_ITEM_KEYS)}"
            )
        prop: dict[str, Any] = {}
        kind = item.get("type")
        if kind is not None:
            if str(kind).lower() not in _TYPE_NAMES:
                raise ValueError(
                    f"input {item['name']!r} has type {kind!r}; use one of "
                    f"{sorted(set(_TYPE_NAMES.values()))}"
                )
            prop["type"] = _TYPE_NAMES[str(kind).lower()]
        for key in ("description", "default", "enum"):
            if key in item:
                prop[key] = item[key]
        properties[item["name"]] = prop
        if item.get("required") is True:
            required.append(item["name"])
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


InputsSchema = Annotated[dict[str, Any] | None, BeforeValidator(_inputs_shorthand)]


class OutputContract(_Model):
    """An output the run must produce (checked when the run ends)."""

    stage: str = Field(..., min_length=1, description="The stage that produces it.")
    key: str = Field(..., min_length=1, description="The field of that stage's output.")
    required: bool = Field(False, description="A missing or null value fails the run.")
    description: str = Field("", description="What it is.")


class Contracts(_Model):
    """The run's contract: its inputs, required outputs and limits."""

    inputs: InputsSchema = Field(
        None,
        description="Same as top-level inputs; also the 0.7.0 list of {name, type, "
        "description, required, default}.",
    )
    outputs: list[OutputContract] = Field(
        default_factory=list, description="Outputs the run must produce."
    )
    completion: str | None = Field(
        None, description="What 'done' means, for people (shown by armature plan)."
    )
    max_llm_calls: int | None = Field(
        None,
        ge=1,
        description="The run fails (limit_exceeded) before its LLM call number N+1; counts "
        "every model call of every attempt, iteration and tool turn.",
    )
    max_iterations: int | None = Field(
        None,
        ge=1,
        description="The run fails before its stage execution number N+1 (retries and loop "
        "iterations count).",
    )
    timeout_hours: float | None = Field(
        None,
        gt=0,
        description="Wall-clock bound on the whole run, human gates included (a Temporal "
        "run timeout).",
    )
    output_max_chars: int | None = Field(
        None, ge=1, description="Default output_max_chars for every stage."
    )


class ToolModule(_Model):
    """A Python module whose ``register(registry)`` adds tools by name."""

    module: str = Field(
        ...,
        pattern=r"^[A-Za-z_][\w.]*$",
        description="Dotted import path, importable by the worker.",
    )
    api_key_env: StrList = Field(
        default_factory=list,
        description="Environment variables its tools need (armature doctor checks them).",
    )


class SkillDef(_Model):
    """Reusable instructions a role adds to its prompt (``role.skills``)."""

    id: str | None = Field(None, description="Defaults to its key in skill_library.")
    description: str = Field("", description="The skill's heading in the prompt.")
    content: str | None = Field(None, description="The skill's text.")
    path: str | None = Field(
        None,
        description="A file holding the text, relative to the spec's folder and inside its tree.",
    )
    adapter: dict[str, Any] | None = Field(
        None,
        description="0.7.0 field (a LoRA adapter replacing the text), accepted with a warning.",
    )

    @model_validator(mode="after")
    def _one_source(self) -> SkillDef:
        if self.content is None and self.path is None and self.adapter is None:
            raise ValueError("a skill needs content (its text) or path (a file with the text)")
        if self.content is not None and self.path is not None:
            raise ValueError("give a skill content or path, not both")
        return self


class AgentRef(_Model):
    """An agent bundle file (agent.yaml with a role) a stage uses by ``agent: key``."""

    path: str = Field(
        ..., min_length=1, description="agent.yaml, relative to the spec, inside its folder tree."
    )
    version: str | None = Field(None, description="Informational.")


class ContextLayer(_Model):
    """A named block of context that context_policy.must puts into prompts."""

    name: str = Field(..., pattern=IDENTIFIER.pattern, description="Its name in must/never.")
    precedence: int = Field(0, description="Higher layers come first.")
    content: str | None = Field(None, description="The text.")
    src: str | None = Field(
        None, description="A file with the text, relative to the spec, inside its folder tree."
    )
    never: StrList = Field(
        default_factory=list, description="Context keys no stage may see (a floor)."
    )

    @model_validator(mode="after")
    def _one_source(self) -> ContextLayer:
        if (self.content is None) == (self.src is None):
            raise ValueError(f"context layer {self.name!r} needs exactly one of content or src")
        return self


HQS_COMPONENTS: tuple[str, ...] = ("output_valid", "success", "judge", "latency", "happy_path")


class HQSConfig(_Model):
    """How this spec's runs are scored."""

    weights: dict[Literal["output_valid", "success", "judge", "latency", "happy_path"], float] = (
        Field(
            default_factory=dict,
            description="Component weights (missing ones keep their defaults: output_valid "
            "0.35, success 0.25, judge 0.20, latency 0.10, happy_path 0.10).",
        )
    )

    @model_validator(mode="after")
    def _check_weights(self) -> HQSConfig:
        bad = {k: v for k, v in self.weights.items() if v < 0}
        if bad:
            raise ValueError(f"HQS weights must be >= 0, got {bad}")
        complete = len(self.weights) == len(HQS_COMPONENTS)
        if complete and sum(self.weights.values()) <= 0:
            raise ValueError("HQS weights sum to 0; give at least one a positive weight")
        return self


#: Older self_improvement.editable_surfaces names and what they cover here.
SURFACE_GROUPS: dict[str, tuple[str, ...]] = {
    "descriptions": ("description",),
    "model_tiers": ("model_tier",),
    "retry_counts": (),
    "timeouts": (),
    "schemas": (),
}
