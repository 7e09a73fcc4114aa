"""Review lanes: which verified spec changes may apply by themselves, and which wait for a person.

A change is classified by what it does, not by who proposed it: both spec texts are parsed and
compared field by field (stages matched by id). Only changes on a short list of known-safe,
reversible fields are in the ``auto`` lane — a role's description (its prompt), temperature or
max_tokens, a stage's ``timeout_s``, its retry limit ``on_fail.loop.max``, and its
``model_tier`` when the old and the new tier send the call to the same place (same
``provider``, ``api_base`` and ``api_key_env``: a bigger or smaller model of the same service,
so no data or credential goes anywhere new; what it costs is in the HQS the change verified
on). Everything else — stages added or removed, gates, safety rules or mode, output schemas,
tools, depends_on, a tier on another provider or endpoint, the tiers themselves, any field not
on that list — is ``review``: it never applies itself, however well it verified.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from armature_temporal.errors import SpecError
from armature_temporal.spec.loader import load_spec_text

__all__ = ["AUTO_FIELDS", "Lane", "classify", "classify_at", "classify_specs"]

Lane = Literal["auto", "review"]

#: Per-stage fields (dotted, below ``stages[id]``) whose changes are safe and reversible.
AUTO_FIELDS = frozenset(
    {
        "role.description",
        "role.temperature",
        "role.max_tokens",
        "timeout_s",
        "on_fail.loop.max",
    }
)

#: What a tier's destination is: where its calls go and with which credential.
_DESTINATION = ("provider", "api_base", "api_key_env")


def _same_destination(tiers: dict[str, Any], old: Any, new: Any) -> bool:
    """Whether tiers ``old`` and ``new`` (both declared in ``tiers``) call the same service."""
    a, b = tiers.get(str(old)), tiers.get(str(new))
    if not isinstance(a, dict) or not isinstance(b, dict):
        return False
    return all(a.get(key) == b.get(key) for key in _DESTINATION)


#: How a review reason names the kind of change, by the first part of the changed field.
_KINDS = {
    "gate": "gate",
    "safety_rules": "safety rules",
    "safety_mode": "safety mode",
    "output_schema": "output_schema",
    "tool": "tool",
    "depends_on": "depends_on",
    "role.tools": "tools",
    "role.model_tier": "model tier",
}


def _flatten(value: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(value, dict) and value:
        for key, item in value.items():
            _flatten(item, f"{prefix}.{key}" if prefix else str(key), out)
    else:
        out[prefix] = value


def _kind(path: str) -> str:
    for head, kind in _KINDS.items():
        if path == head or path.startswith(head + "."):
            return kind
    return path


def classify_specs(base: dict[str, Any], candidate: dict[str, Any]) -> tuple[Lane, list[str]]:
    """The lane of the change from one spec dump (``Spec.model_dump(mode="json")``) to another,
    and one reason per changed field (review reasons first)."""
    review: list[str] = []
    auto: list[str] = []
    old_stages = {s["id"]: s for s in base.get("stages", [])}
    new_stages = {s["id"]: s for s in candidate.get("stages", [])}
    review += [f"stage {sid!r} removed" for sid in old_stages if sid not in new_stages]
    review += [f"stage {sid!r} added" for sid in new_stages if sid not in old_stages]
    if [s for s in old_stages if s in new_stages] != [s for s in new_stages if s in old_stages]:
        review.append("stages reordered")
    same_tiers = base.get("model_tiers") == candidate.get("model_tiers")
    tiers = base.get("model_tiers") or {}
    for sid in old_stages.keys() & new_stages.keys():
        old_flat: dict[str, Any] = {}
        new_flat: dict[str, Any] = {}
        _flatten(old_stages[sid], "", old_flat)
        _flatten(new_stages[sid], "", new_flat)
        for path in sorted(old_flat.keys() | new_flat.keys()):
            if old_flat.get(path) == new_flat.get(path):
                continue
            both = path in old_flat and path in new_flat
            if path in AUTO_FIELDS and both:
                auto.append(f"{sid}.{path} changed")
            elif (
                path == "role.model_tier"
                and both
                and same_tiers
                and _same_destination(tiers, old_flat[path], new_flat[path])
            ):
                auto.append(f"{sid}.{path} changed (same provider and endpoint)")
            else:
                review.append(f"{sid}: {_kind(path)} changed ({path})")
    rest_old = {k: v for k, v in base.items() if k != "stages"}
    rest_new = {k: v for k, v in candidate.items() if k != "stages"}
    for key in sorted(rest_old.keys() | rest_new.keys()):
        if rest_old.get(key) != rest_new.get(key):
            review.append(f"{_kind(key)} changed ({key})" if key in _KINDS else f"{key} changed")
    lane: Lane = "review" if review or not auto else "auto"
    return lane, review + auto


def classify(
    base_text: str, candidate_text: str, *, filename: str, base_dir: Path | None
) -> tuple[Lane, list[str]]:
    """The lane of the change from ``base_text`` to ``candidate_text`` (both spec YAML), with
    its reasons. A text that does not load is ``review``: nothing unparsed applies itself."""
    try:
        base = load_spec_text(base_text, filename, base_dir=base_dir).spec
        candidate = load_spec_text(candidate_text, filename, base_dir=base_dir).spec
    except SpecError as exc:
        return "review", [f"a spec text does not load, so the change cannot be read: {exc}"]
    return classify_specs(base.model_dump(mode="json"), candidate.model_dump(mode="json"))


def classify_at(
    spec_path: str | None, base_text: str, candidate_text: str
) -> tuple[Lane, list[str]]:
    """:func:`classify` for texts of the spec file at ``spec_path`` (None: a spec given as
    text alone), resolving its resource files beside it."""
    return classify(
        base_text,
        candidate_text,
        filename=spec_path or "<spec>",
        base_dir=Path(spec_path).parent if spec_path else None,
    )
