"""``finetune.method``: the spec field, its hash, the fine-tune loop's DPO jobs (pairs counted as
the bandit ladder counts them, with the runs they came from, and a clear stop when there are too
few) and how a preference-tuned adapter is decided against the base model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from activities.finetune import _prepare
from armature_temporal.errors import SpecError
from armature_temporal.finetune.export import dpo_rows
from armature_temporal.finetune.models import (
    FinetuneInput,
    PreferencePair,
    PreferenceRequest,
)
from armature_temporal.finetune.preference import pairs_from_rows, split_pairs
from armature_temporal.finetune.verify import (
    preference_heldout_inputs,
)
from armature_temporal.spec.compiler import compile_spec
from armature_temporal.spec.loader import load_spec_text
from armature_temporal.store import TraceStore
from armature_temporal.views import load_runs
from benchmarks.sao import SPEC as SAO_SPEC
from benchmarks.sao import prompts, write_episodes

SPEC = """\
name: {name}
finetune: {{base_model: ./tiny, min_examples: {need}{extra}}}
stages:
  - id: describe
    role: {{name: Describer, description: "Describe {{{{ inputs.thing }}}}."}}
"""


def _spec(extra: str = "", *, name: str = "m", need: int = 20) -> str:
    return SPEC.format(name=name, need=need, extra=extra)


def test_an_unknown_method_is_a_spec_error_that_lists_sft_and_dpo() -> None:
    with pytest.raises(SpecError) as caught:
        load_spec_text(_spec(", method: ppo"), "m.yaml")
    message = str(caught.value)
    assert "finetune.method: 'ppo' is not one of 'sft' or 'dpo'" in message
    assert message.startswith("m.yaml:2:")


def test_continual_with_method_dpo_is_a_spec_error_with_the_fix() -> None:
    with pytest.raises(SpecError, match=r"finetune\.continual: .* is for method sft; .*remove"):
        load_spec_text(_spec(", method: dpo, continual: true"), "m.yaml")


def test_method_at_its_default_keeps_the_spec_hash_and_dpo_changes_it() -> None:
    def spec_hash(extra: str) -> str:
        return compile_spec(load_spec_text(_spec(extra), "m.yaml")).spec_hash

    plain = spec_hash("")
    assert spec_hash(", method: sft") == plain
    assert spec_hash(", method: dpo") != plain
    plan = compile_spec(load_spec_text(_spec(", method: dpo"), "m.yaml"))
    assert plan.finetune is not None and plan.finetune.method == "dpo"


def _episodes() -> list[dict[str, Any]]:
    """benchmarks/sao.py's recorded episodes (a failed and a successful run of each prompt)
    as dpo_rows exports them, with run ids."""
    store = TraceStore()
    try:
        write_episodes(store)
        runs = load_runs(store, spec=SAO_SPEC, limit=1000)
    finally:
        store.close()
    rows, _ = dpo_rows(runs, spec=SAO_SPEC, stage="describe", with_run_id=True)
    return rows


def test_dpo_rows_name_the_runs_each_pair_came_from_and_pairs_keep_them() -> None:
    rows = _episodes()
    assert len(rows) == len(prompts())
    for row in rows:
        thing_colour = row["run_id"].removeprefix("avoided-")
        assert row["run_id"].startswith("avoided-")  # the chosen reply's run
        assert row["rejected_run_id"] == f"hit-{thing_colour}"
    pair = pairs_from_rows(rows)[0]
    assert pair.run_ids == [rows[0]["run_id"], rows[0]["rejected_run_id"]]
    # Without run ids (the export command) the rows are as before.
    assert "run_id" not in dpo_rows([], spec=SAO_SPEC)[0]


def _pair(prompt: str, chosen_run: str, rejected_run: str) -> PreferencePair:
    return PreferencePair(
        prompt=[{"role": "user", "content": prompt}],
        chosen="good",
        rejected="bad",
        run_ids=[chosen_run, rejected_run],
    )


def test_preference_heldout_inputs_are_the_held_out_pairs_runs_inputs_never_a_training_one() -> (
    None
):
    pairs = [_pair(f"p{i}", f"ok-{i}", f"bad-{i}") for i in range(20)]
    inputs = {
        f"{kind}-{i}": {"topic": f"t{i}", kind: 1} for i in range(20) for kind in ("ok", "bad")
    }
    train, held = split_pairs(pairs, 0.5)
    got = preference_heldout_inputs(pairs, 0.5, inputs.get)
    assert got == [inputs[r] for p in held for r in p.run_ids]  # chosen's, then rejected's
    # A held-out run whose inputs were a training pair's run's is left out.
    inputs[held[0].run_ids[0]] = inputs[train[0].run_ids[1]]
    again = preference_heldout_inputs(pairs, 0.5, inputs.get)
    assert again == [inputs[r] for p in held for r in p.run_ids][1:]
    # One prompt cannot be split: no held-out inputs (and train_dpo would refuse it).
    assert preference_heldout_inputs(pairs[:1], 0.5, inputs.get) == []


def _write(tmp_path: Path, text: str) -> FinetuneInput:
    (tmp_path / "tiny").mkdir(exist_ok=True)  # a base model directory (nothing loads it here)
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return FinetuneInput(spec_text=text, spec_path=str(path))


def test_a_dpo_round_with_too_few_pairs_says_how_many_how_many_needed_and_how_to_get_more(
    tmp_path: Path,
) -> None:
    _episodes()
    text = _spec(", method: dpo", name=SAO_SPEC, need=500)
    prepared = _prepare(_write(tmp_path, text), "round-1")
    assert prepared.stop is not None and prepared.stop.status == "too_few_examples"
    why = prepared.skipped["describe"]
    assert why.startswith(
        f"{len(prompts())} preference pairs (from {len(prompts())} prompt(s) sent more than "
        f"once in {2 * len(prompts())} run(s)), fewer than min_examples = 500 for method dpo; "
        "a pair is two attempts of the stage sent exactly the same messages where one did "
        "better; to get more, run the spec again on inputs it has already run"
    )
    # Where pairs come from (dpo_rows groups attempts by their messages), not inputs that
    # differ in fields the prompt does not use; a retry within a run is sent the error too.
    assert "fields its prompt does not use" not in why
    assert "a retry within a run does not" in why
    assert "have a judge stage read it" in why and "lower finetune.min_examples" in why
    assert prepared.stop.detail == f"describe: {why}"


def test_a_dpo_round_plans_a_preference_job_on_the_pairs_the_ladder_counts(
    tmp_path: Path,
) -> None:
    rows = _episodes()
    text = _spec(", method: dpo, max_steps: 7, eval_share: 0.3", name=SAO_SPEC, need=8)
    prepared = _prepare(_write(tmp_path, text), "round-1")
    assert prepared.stop is None
    (job,) = prepared.jobs
    request = job.request
    assert isinstance(request, PreferenceRequest)
    assert request.pairs == pairs_from_rows(rows) and request.max_steps == 7
    assert request.out_dir.endswith("/describe/round-1")
    # The paired runs' inputs: those of the held-out prompts' runs (both episodes of each).
    _, held = split_pairs(request.pairs, 0.3)
    things = {(p.prompt[1]["content"]) for p in held}
    assert len(job.heldout_inputs) == len(held)  # both episodes of a prompt had one input
    for value in job.heldout_inputs:
        assert f"Give the {value['thing']}'s colour as JSON: it is {value['colour']}." in things
    # No verified SFT adapter, but enough successful replies: the round trains one first as
    # the DPO reference, on the replies outside the held-out pairs' prompts and runs.
    sft = job.sft_first
    assert sft is not None and request.reference_adapter is None
    assert sft.out_dir.endswith("/describe/round-1-sft") and sft.max_steps == 7
    held_runs = {r for p in held for r in p.run_ids}
    assert sft.examples and len(sft.examples) >= 8
    assert not {e.run_id for e in sft.examples} & held_runs
    assert not {json.dumps(e.messages) for e in sft.examples} & {json.dumps(p.prompt) for p in held}
    assert request.reference.startswith(
        f"an SFT adapter the round trained first on {len(sft.examples)} successful replies "
        "(the stage has no verified SFT adapter)"
    )


def test_the_ladders_sao_rung_counts_the_pairs_the_loop_trains_on_and_dates_its_unlock(
    tmp_path: Path,
) -> None:
    from armature_temporal.commands.bandit_status import _store_rungs

    rows = _episodes()
    plan = compile_spec(load_spec_text(_spec(", method: dpo", name=SAO_SPEC, need=8), "m.yaml"))
    store = TraceStore()
    try:
        runs = load_runs(store, spec=SAO_SPEC, limit=1000)
    finally:
        store.close()
    rungs = {r.rung: r for r in _store_rungs(plan, plan.stage("describe"), runs)}
    sao = rungs["sao"]
    assert sao.status == "unlocked" and sao.progress == f"{len(rows)}/8"
    # Dated by the run that completed the 8th pair (both of a pair's runs must exist).
    assert sao.unlocked_at in {r.finished_at for r in runs}
    # With method sft no DPO round runs: the rung is off and says why, the pairs still counted.
    sft_plan = compile_spec(load_spec_text(_spec("", name=SAO_SPEC, need=8), "m.yaml"))
    off = {r.rung: r for r in _store_rungs(sft_plan, sft_plan.stage("describe"), runs)}["sao"]
    assert off.status == "off" and off.unlocked_at is None
    assert off.threshold.startswith("finetune.method is 'sft': no DPO round runs")
    assert off.progress == f"{len(rows)}/8"
