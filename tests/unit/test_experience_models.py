"""The experience package's names, a heuristic's id, and the status life cycle: what the
automatic steps may do, and what a person may do besides."""

from __future__ import annotations

import pytest

import armature_temporal.experience as experience
from armature_temporal.experience import Heuristic, allowed_transitions, heuristic_id


def test_the_package_exports_a_deliberate_set_of_names() -> None:
    assert sorted(experience.__all__) == sorted(
        [
            "HEURISTIC_KINDS",
            "HEURISTIC_STATUSES",
            "MERGE_SIMILARITY",
            "Admission",
            "Embedder",
            "Heuristic",
            "HeuristicError",
            "HeuristicEvent",
            "HeuristicKind",
            "HeuristicStatus",
            "admit",
            "allowed_transitions",
            "cosine",
            "get_embedder",
            "heuristic_id",
            "prompt_lessons",
            "rescreen",
            "screen",
        ]
    )


def test_the_id_hashes_spec_stage_and_normalised_text() -> None:
    hid = heuristic_id("triage", "answer", "Quote  the Order number.")
    assert hid == heuristic_id("triage", "answer", "quote the order number.")
    assert hid.startswith("h-") and len(hid) == 14
    assert hid != heuristic_id("triage", "plan", "Quote the order number.")
    assert hid != heuristic_id("other", "answer", "Quote the order number.")
    assert heuristic_id("triage", None, "x") != heuristic_id("triage", "answer", "x")


@pytest.mark.parametrize(
    ("status", "automatic", "person"),
    [
        (
            "candidate",
            {"quarantined", "rejected"},
            {"quarantined", "rejected", "promoted", "retired"},
        ),
        ("quarantined", {"promoted", "rejected"}, {"promoted", "rejected", "retired"}),
        ("promoted", {"retired"}, {"retired", "rejected"}),
        ("rejected", set(), set()),
        ("retired", set(), {"promoted"}),
    ],
)
def test_the_life_cycle(status: str, automatic: set[str], person: set[str]) -> None:
    for by in ("scan", "memory-ci", "utility", "distiller"):
        assert allowed_transitions(status, by) == automatic
    assert allowed_transitions(status, "person:ana") == person


def test_only_a_promoted_heuristic_is_trusted() -> None:
    base = {
        "id": "h-0",
        "spec_name": "s",
        "stage_id": None,
        "kind": "strategic",
        "text": "t",
        "source": "person",
        "provenance": [],
        "created_at": "2026-01-01T00:00:00+00:00",
        "updated_at": "2026-01-01T00:00:00+00:00",
        "alpha": 3.0,
    }
    trusts = {s: Heuristic(status=s, **base).trust for s in experience.HEURISTIC_STATUSES}  # type: ignore[arg-type]
    assert trusts == {
        "candidate": 0.0,
        "quarantined": 0.0,
        "promoted": 1.0,
        "rejected": 0.0,
        "retired": 0.0,
    }
    assert Heuristic(status="promoted", **base).utility == 0.75  # type: ignore[arg-type]
