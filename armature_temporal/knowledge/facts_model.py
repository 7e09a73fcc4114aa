"""What a fact is: a :class:`Fact` (a subject entity, a predicate, an object that is a value or
another entity), the :class:`Provenance` of each sighting of it, and the :class:`Entity` and
:class:`Relation` views of the graph the facts make.

A fact with an entity for its object is a relation (an edge of the graph); one with a value is an
attribute of its subject. Names are compared by :func:`entity_key` (case and spacing folded),
predicates by :func:`predicate_key`, values by :func:`value_key`.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from armature_temporal.errors import ArmatureError
from armature_temporal.scanner import Finding

__all__ = [
    "FACT_KINDS",
    "FACT_STATUSES",
    "Cardinality",
    "Entity",
    "Fact",
    "FactError",
    "FactKind",
    "FactStatus",
    "Provenance",
    "Relation",
    "canonical_json",
    "entity_key",
    "fact_id",
    "moment",
    "predicate_key",
    "value_key",
]

#: 0.7.0's record types (``MemoryType``).
FactKind = Literal["fact", "event", "instruction", "preference"]
FACT_KINDS: tuple[FactKind, ...] = ("fact", "event", "instruction", "preference")
#: ``current``: what the graph holds now. ``superseded``: an older version (an update, or a
#: value the world moved on from). ``contradicted``: a claim a newer one disagreed with.
#: ``rejected``: the admission scan found something in it; never current.
FactStatus = Literal["current", "superseded", "contradicted", "rejected"]
FACT_STATUSES: tuple[FactStatus, ...] = ("current", "superseded", "contradicted", "rejected")
#: ``one``: the subject has one value of the predicate at a time (a new one contradicts or
#: supersedes); ``many``: several may hold together (a person's skills, a graph's edges).
Cardinality = Literal["one", "many"]


class FactError(ArmatureError):
    """A fact operation that cannot be done as asked (an unknown fact, entity or namespace)."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def canonical_json(value: Any) -> str:
    """``value`` as JSON with sorted keys and no spaces: equal values, equal strings."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def entity_key(name: str) -> str:
    """The key an entity is known by: its name, case folded, spacing collapsed, without the
    punctuation around it (``"  ACME Corp. "`` and ``"acme corp"`` are one entity)."""
    return " ".join(name.casefold().split()).strip(" .,;:!?\"'`")


def predicate_key(name: str) -> str:
    """A predicate's key: lower case, words joined by ``_`` (``"Founded In"`` -> ``founded_in``)."""
    return "_".join(re.findall(r"[^\W_]+", name.casefold()))


def value_key(value: Any) -> str:
    """What two values are compared by: strings folded like names, numbers as numbers (1 and
    1.0 are one value), anything else as canonical JSON."""
    if isinstance(value, str):
        return "s:" + " ".join(value.casefold().split())
    if isinstance(value, bool) or value is None:
        return "j:" + canonical_json(value)
    if isinstance(value, int | float):
        return "n:" + repr(float(value))
    return "j:" + canonical_json(value)


def moment(stamp: str) -> datetime:
    """An ISO 8601 time as an aware datetime (no offset: UTC)."""
    at = datetime.fromisoformat(stamp)
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def _iso(stamp: str) -> str:
    try:
        moment(stamp)
    except ValueError:
        raise ValueError(
            f"recorded_at {stamp!r} is not an ISO 8601 time (say 2026-12-04T10:00:00+00:00)"
        ) from None
    return stamp


#: An ISO 8601 time, checked.
IsoTime = Annotated[str, AfterValidator(_iso)]


def fact_id(namespace: str, subject: str, predicate: str, obj: str, origin: Provenance) -> str:
    """A fact's id: the same claim from the same run, stage and field is the same fact (a
    retried activity sends it again and nothing new is stored). ``obj`` is the object's key."""
    parts = [namespace, subject, predicate, obj, origin.run_id, origin.stage, origin.field]
    digest = hashlib.sha256("\x1f".join(parts).encode()).hexdigest()
    return f"f_{digest[:16]}"


class Provenance(_Model):
    """Where and when a fact was seen: the spec's memory namespace, the run, the stage, the
    field of the stage's output (``facts[2]``), when, and the sha256 of that output."""

    namespace: str
    run_id: str
    stage: str
    field: str = ""
    recorded_at: IsoTime
    source_hash: str = ""


class Fact(_Model):
    """One claim: ``subject`` ``predicate`` ``object`` (a value, or an entity for a relation).

    ``provenance`` lists every sighting, the first being where it came from; ``recorded_at``
    is that first one's time. ``superseded_by`` names the fact that took its place as current
    and ``previous`` the one this fact replaced; ``findings`` are the admission scan's (for a
    ``rejected`` fact).
    """

    id: str
    namespace: str
    subject: str
    subject_name: str
    predicate: str
    value: Any = None
    object_entity: str | None = None
    object_name: str | None = None
    text: str
    kind: FactKind = "fact"
    confidence: float = Field(0.5, ge=0.0, le=1.0)
    cardinality: Cardinality = "one"
    supersedes: bool = False
    status: FactStatus = "current"
    superseded_by: str | None = None
    previous: str | None = None
    recorded_at: IsoTime
    provenance: list[Provenance] = Field(default_factory=list)
    findings: list[Finding] = Field(default_factory=list)

    @property
    def is_relation(self) -> bool:
        return self.object_entity is not None

    @property
    def object_key(self) -> str:
        """The object as compared: ``e:<entity key>`` or the value's :func:`value_key`."""
        if self.object_entity is not None:
            return "e:" + self.object_entity
        return value_key(self.value)

    @property
    def object_display(self) -> str:
        if self.object_name is not None:
            return self.object_name
        return self.value if isinstance(self.value, str) else canonical_json(self.value)

    @property
    def confirmed_at(self) -> str:
        """When it was last seen (its newest sighting): what staleness counts from."""
        return max([self.recorded_at, *(p.recorded_at for p in self.provenance)], key=moment)

    @property
    def slot(self) -> tuple[str, str, str]:
        """What versions of one claim share: namespace, subject, predicate."""
        return (self.namespace, self.subject, self.predicate)

    def order(self) -> tuple[datetime, str]:
        """Which of two facts is newer: the later ``recorded_at``, then the greater id."""
        return (moment(self.recorded_at), self.id)


class Relation(_Model):
    """An edge of the graph: ``subject`` -``predicate``-> ``object`` (entity keys), from a
    fact (``fact_id``), with its provenance."""

    fact_id: str
    subject: str
    predicate: str
    object: str
    text: str
    provenance: list[Provenance]


class Entity(_Model):
    """A node of the graph: its key, the name it was first given, and how many current facts
    it is the subject of (``facts``), relations it has out and in, and stale facts."""

    key: str
    name: str
    facts: int = 0
    relations_out: int = 0
    relations_in: int = 0
    stale: int = 0
    disputed: bool = False
    first_seen: Provenance | None = None
