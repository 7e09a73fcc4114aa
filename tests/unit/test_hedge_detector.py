"""The hedge detector: fitted on its labelled corpus, calibrated, and held-out figures."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import pytest

from armature_temporal.runtime.confidence.hedging import (
    FEATURES,
    HedgeModel,
    HedgeModelError,
    hedge_confidence,
    hedge_features,
    load_hedge_model,
)
from armature_temporal.runtime.confidence.train import (
    auroc,
    expected_calibration_error,
    fit_hedge_model,
    held_out_figures,
    load_corpus,
    main,
)


def test_the_shipped_weights_are_what_the_train_script_fits() -> None:
    shipped = load_hedge_model()
    fitted = fit_hedge_model(load_corpus())
    assert set(shipped.weights) == set(FEATURES)
    for name, weight in fitted.weights.items():
        assert shipped.weights[name] == pytest.approx(weight, abs=1e-4)
    assert shipped.platt_a == pytest.approx(fitted.platt_a, abs=1e-4)
    assert shipped.meta["held_out"]["auroc"] >= 0.9


def test_held_out_figures_separate_and_calibrate() -> None:
    figures = held_out_figures(load_corpus())
    assert figures["auroc"] >= 0.9
    assert figures["brier"] < 0.1
    assert figures["ece"] < figures["ece_before_platt"]  # Platt scaling helps, out of fold


def test_calibration_is_monotone_in_the_logit_and_within_0_1() -> None:
    model = load_hedge_model()
    assert model.platt_a > 0  # a higher logit never lowers the probability
    words = ["may", "perhaps", "not sure", "42", "but", "?", "definitely", "the", "invoice"]
    rng = random.Random(7)
    pairs = []
    for _ in range(300):
        text = "so " + " ".join(rng.choice(words) for _ in range(rng.randint(1, 12)))
        pairs.append((model.logit(hedge_features(text)), model.probability(text)))
    assert all(0.0 <= p <= 1.0 for _, p in pairs)
    pairs.sort()
    assert all(a[1] <= b[1] + 1e-12 for a, b in itertools.pairwise(pairs))


def test_each_cue_class_lowers_confidence_and_an_empty_answer_has_none() -> None:
    base = "The parcel arrives on Friday."
    for cue in ("It might be that", "Perhaps", "I'm not sure, but", "Hard to say, but"):
        assert hedge_confidence(f"{cue} the parcel arrives on Friday.") < hedge_confidence(base)
    assert hedge_confidence(base + " Or is it Monday?") < hedge_confidence(base)
    assert hedge_confidence("") == 0.0


def test_auroc_and_ece_helpers() -> None:
    assert auroc([0.9, 0.8, 0.1], [True, True, False]) == 1.0
    assert auroc([0.5, 0.5], [True, False]) == 0.5
    ece, table = expected_calibration_error([0.95, 0.95, 0.05], [True, True, False])
    assert ece == pytest.approx(0.05)
    assert [row["n"] for row in table] == [1, 2]


def test_the_train_script_writes_a_loadable_weights_file(tmp_path: Path) -> None:
    out = tmp_path / "w.json"
    assert main(["--out", str(out)]) == 0
    model = load_hedge_model(out)
    assert model.meta["simulated_check"]["auroc_unhedged"] >= 0.9


def test_a_bad_weights_file_names_the_fix(tmp_path: Path) -> None:
    bad = tmp_path / "w.json"
    bad.write_text(json.dumps({"format": 99}), encoding="utf-8")
    with pytest.raises(HedgeModelError, match="retrain"):
        load_hedge_model(bad)
    bad.write_text(json.dumps({"format": 1, "bias": 0, "weights": {"length": 1}}))
    with pytest.raises(HedgeModelError, match="unknown features"):
        load_hedge_model(bad)
    assert isinstance(HedgeModel.from_json({"format": 1, "bias": 0, "weights": {}}), HedgeModel)
