"""self_improvement.drift_threshold: a drift score above it makes a round propose changes even
when the spec's mean HQS is at target_hqs (improve_prepare, with the store and the diagnosis
given here instead of read from runs)."""

from __future__ import annotations

from pathlib import Path

import pytest

import activities.improve as improve
from armature_temporal.improve.models import Diagnosis, ImproveInput, ImproveRound, Verification
from armature_temporal.store import TraceStore
from tests.unit.test_improve_predict import stats

SPEC = """\
name: drifting
model_tiers:
  small: {provider: simulate, valid_rate: 0.5}
  frontier: {provider: simulate}
self_improvement:
  editable_surfaces: [draft.model_tier]
  min_traces: 5
  target_hqs: 0.8
  THRESHOLD
stages:
  - id: draft
    role: {name: Drafter, model_tier: small, description: Write a headline.}
    output_mode: json
"""


def _prepare(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threshold: str) -> object:
    store = TraceStore(f"sqlite:///{tmp_path / 'traces.db'}")
    # An earlier round verified that draft's invalid output was fixed; it is failing again.
    store.save_round(
        ImproveRound(
            id="improve-drifting-0",
            spec_name="drifting",
            spec_hash="0" * 64,
            created_at="2025-01-01T00:00:00+00:00",
            status="at_target",
            runs=5,
            verification=Verification(
                spec_hash="0" * 64,
                runs=5,
                current_failures=[],
                verified_fixes=["output_invalid:draft"],
            ),
        )
    )
    text = SPEC.replace("THRESHOLD", threshold)

    def fake_diagnose(plan: object, runs: object) -> Diagnosis:
        return Diagnosis(
            spec_name="drifting",
            spec_hash=plan.spec_hash,  # type: ignore[attr-defined]
            runs=10,
            mean_hqs=0.85,  # above target_hqs
            stages=[stats("draft", invalid_rate=0.5)],
            sample_inputs=[{"a": 1}, {"a": 2}],
        )

    monkeypatch.setattr(improve, "store_for", lambda url: store)
    monkeypatch.setattr(improve, "load_runs", lambda *a, **k: [])
    monkeypatch.setattr(improve, "diagnose", fake_diagnose)
    try:
        return improve._prepare(ImproveInput(spec_text=text, spec_path=str(tmp_path / "d.yaml")))
    finally:
        rounds = store.rounds("drifting")
        store.close()
        assert rounds[-1].id == "improve-local" and rounds[-1].drift == 1.0


def test_drift_above_the_threshold_runs_a_round_at_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prepared = _prepare(tmp_path, monkeypatch, "")  # default drift_threshold 0.2
    assert prepared.stop is None  # type: ignore[attr-defined]
    assert [c.change.surface for c in prepared.candidates] == ["draft.model_tier"]  # type: ignore[attr-defined]
    assert prepared.verification.regressed == ["output_invalid:draft"]  # type: ignore[attr-defined]


def test_drift_at_or_below_the_threshold_stops_at_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prepared = _prepare(tmp_path, monkeypatch, "drift_threshold: 1.0")
    assert prepared.stop is not None and prepared.stop.status == "at_target"  # type: ignore[attr-defined]
    assert prepared.stop.verification.drift == 1.0  # type: ignore[attr-defined]
