"""The post-run extractor: a stage's structured output turned into candidate facts, with
provenance, by rule (no model call, so the same output always gives the same facts).

0.7.0 asked a model to pull ``{entity, fact, confidence, type}`` records out of the captured
memories; here the stage says what it knows in its output, in any of these shapes (the keys in
brackets are accepted spellings of the same thing):

``facts``: a list of claims, each one of
    - a triple: ``{"subject" [entity], "predicate" [attribute, relation], "object" [value]}``,
      the object a value (string, number, boolean, list, object) or ``{"entity": NAME}`` for a
      relation to another entity (or ``"object_entity": NAME`` beside it). Optional:
      ``text`` (how to say it; else made from the triple), ``confidence`` (0 to 1, default
      0.5, as 0.7.0), ``type`` [kind] (fact, event, instruction, preference), ``supersedes``
      (true: this value replaces the earlier one because the world changed, rather than
      disagreeing with it) and ``cardinality`` (``one``: one value at a time, the default for
      a value; ``many``: several hold together, the default for a relation).
    - 0.7.0's record: ``{"entity", "fact", "confidence"?, "type"?}``: the sentence is the
      claim (predicate ``states``, cardinality many: an entity has many true sentences).
``entities``: ``[{"name", "type"?, "attributes"?: {predicate: value}}]``: a ``type`` is the
    fact ``NAME is_a TYPE``; each attribute is a fact.
``relations``: ``[{"subject" [from, source], "predicate" [relation, type], "object" [to,
    target]}]``: relations between entities.

Given ``subject=NAME``, every other top-level field holding a string, number or boolean is a
fact about ``NAME`` too (``{"plan": "pro"}`` -> ``NAME plan: pro``). An item it cannot read is
skipped and named in :attr:`Extraction.skipped` with the reason; nothing raises.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from armature_temporal.knowledge.facts_model import (
    FACT_KINDS,
    Cardinality,
    Fact,
    FactError,
    FactKind,
    Provenance,
    canonical_json,
    entity_key,
    fact_id,
    moment,
    predicate_key,
)

__all__ = ["DEFAULT_CONFIDENCE", "SHAPE_KEYS", "Extraction", "extract_facts"]

DEFAULT_CONFIDENCE = 0.5
#: The top-level fields the extractor reads as shapes (never as ``subject`` attributes).
SHAPE_KEYS = ("facts", "entities", "relations")


@dataclass
class Extraction:
    """The candidate facts an output gave, and what was skipped (``path``: why)."""

    facts: list[Fact] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)


def _first(item: Mapping[str, Any], *names: str) -> Any:
    for name in names:
        if name in item and item[name] is not None:
            return item[name]
    return None


def _name(value: Any) -> str | None:
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        text = " ".join(str(value).split())
        return text if entity_key(text) else None
    return None


@dataclass
class _Context:
    namespace: str
    run_id: str
    stage: str
    recorded_at: str
    source_hash: str
    out: Extraction

    def add(
        self,
        path: str,
        subject: Any,
        predicate: Any,
        obj: Any,
        item: Mapping[str, Any],
        *,
        cardinality: Cardinality | None = None,
    ) -> None:
        subject_name = _name(subject)
        if subject_name is None:
            self.out.skipped[path] = f"no subject entity (got {subject!r})"
            return
        pred = predicate_key(predicate) if isinstance(predicate, str) else ""
        if not pred:
            self.out.skipped[path] = f"no predicate (got {predicate!r})"
            return
        object_name: str | None = None
        if isinstance(obj, Mapping) and set(obj) == {"entity"}:
            object_name = _name(obj["entity"])
            if object_name is None:
                self.out.skipped[path] = f"object entity without a name (got {obj!r})"
                return
        elif _first(item, "object_entity") is not None:
            object_name = _name(item["object_entity"])
        if object_name is None and obj is None:
            self.out.skipped[path] = "no object (a value, or {'entity': NAME})"
            return
        kind = _first(item, "type", "kind") or "fact"
        if kind not in FACT_KINDS:
            self.out.skipped[path] = f"type {kind!r} is not one of {list(FACT_KINDS)}"
            return
        confidence = item.get("confidence", DEFAULT_CONFIDENCE)
        if (
            isinstance(confidence, bool)
            or not isinstance(confidence, int | float)
            or not 0 <= confidence <= 1
        ):
            self.out.skipped[path] = f"confidence {confidence!r} is not a number from 0 to 1"
            return
        given = item.get("cardinality", cardinality)
        card: Cardinality = (
            given if given in ("one", "many") else ("many" if object_name is not None else "one")
        )
        text = item.get("text") if isinstance(item.get("text"), str) else None
        words = pred.replace("_", " ")
        if text is None or not text.strip():
            if object_name is not None:
                text = f"{subject_name} {words} {object_name}"
            else:
                shown = obj if isinstance(obj, str) else canonical_json(obj)
                text = f"{subject_name} {words}: {shown}"
        origin = Provenance(
            namespace=self.namespace,
            run_id=self.run_id,
            stage=self.stage,
            field=path,
            recorded_at=self.recorded_at,
            source_hash=self.source_hash,
        )
        subject_key = entity_key(subject_name)
        object_entity = entity_key(object_name) if object_name is not None else None
        value = None if object_name is not None else obj
        probe = Fact(
            id="",
            namespace=self.namespace,
            subject=subject_key,
            subject_name=subject_name,
            predicate=pred,
            value=value,
            object_entity=object_entity,
            object_name=object_name,
            text=" ".join(text.split()),
            kind=_kind(kind),
            confidence=float(confidence),
            cardinality=card,
            supersedes=item.get("supersedes") is True,
            recorded_at=self.recorded_at,
            provenance=[origin],
        )
        self.out.facts.append(
            probe.model_copy(
                update={"id": fact_id(self.namespace, subject_key, pred, probe.object_key, origin)}
            )
        )


def _kind(value: str) -> FactKind:
    for kind in FACT_KINDS:
        if kind == value:
            return kind
    raise AssertionError(value)  # checked by the caller


def _items(ctx: _Context, output: Mapping[str, Any], key: str) -> list[tuple[str, Any]]:
    value = output.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        ctx.out.skipped[key] = f"expected a list, got {type(value).__name__}"
        return []
    return [(f"{key}[{i}]", item) for i, item in enumerate(value)]


def extract_facts(
    output: Any,
    *,
    namespace: str,
    run_id: str,
    stage: str,
    recorded_at: str,
    subject: str | None = None,
) -> Extraction:
    """The candidate facts in one stage's ``output`` (a mapping, or JSON text of one), each
    with its provenance (``namespace``, ``run_id``, ``stage``, the field, ``recorded_at``
    and the sha256 of the output). Pure: the caller passes the time.

    Raises:
        FactError: ``recorded_at`` is not an ISO 8601 time (the caller's mistake).
    """
    try:
        moment(recorded_at)
    except ValueError:
        raise FactError(
            f"recorded_at {recorded_at!r} is not an ISO 8601 time; pass the run's time, "
            "such as workflow.now().isoformat()"
        ) from None
    if isinstance(output, str):
        try:
            output = json.loads(output)
        except ValueError:
            return Extraction(skipped={"": "the output is text, not a JSON object"})
    if not isinstance(output, Mapping):
        return Extraction(skipped={"": f"the output is {type(output).__name__}, not an object"})
    source_hash = hashlib.sha256(canonical_json(output).encode()).hexdigest()
    ctx = _Context(namespace, run_id, stage, recorded_at, source_hash, Extraction())
    for path, item in _items(ctx, output, "facts"):
        if not isinstance(item, Mapping):
            ctx.out.skipped[path] = f"expected an object, got {type(item).__name__}"
        elif _first(item, "predicate", "attribute", "relation") is None and "fact" in item:
            said = {**item, "text": item.get("text") or item["fact"]}
            ctx.add(path, item.get("entity"), "states", item["fact"], said, cardinality="many")
        else:
            ctx.add(
                path,
                _first(item, "subject", "entity"),
                _first(item, "predicate", "attribute", "relation"),
                _first(item, "object", "value"),
                item,
            )
    for path, item in _items(ctx, output, "entities"):
        if not isinstance(item, Mapping):
            ctx.out.skipped[path] = f"expected an object, got {type(item).__name__}"
            continue
        name = item.get("name")
        kind = _first(item, "type", "kind")
        if kind is not None:
            ctx.add(f"{path}.type", name, "is_a", kind, {}, cardinality="many")
        attributes = item.get("attributes") or {}
        if not isinstance(attributes, Mapping):
            ctx.out.skipped[f"{path}.attributes"] = "expected an object of predicate: value"
            continue
        for attr, value in attributes.items():
            ctx.add(f"{path}.attributes.{attr}", name, attr, value, {})
    for path, item in _items(ctx, output, "relations"):
        if not isinstance(item, Mapping):
            ctx.out.skipped[path] = f"expected an object, got {type(item).__name__}"
            continue
        target = _name(_first(item, "object", "to", "target"))
        ctx.add(
            path,
            _first(item, "subject", "from", "source"),
            _first(item, "predicate", "relation", "type"),
            {"entity": target} if target is not None else None,
            {k: v for k, v in item.items() if k not in ("type",)},
        )
    if subject is not None:
        for name, value in output.items():
            if name in SHAPE_KEYS or not isinstance(value, str | int | float | bool):
                continue
            ctx.add(name, subject, name, value, {})
    return ctx.out
