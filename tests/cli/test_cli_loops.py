"""`armature proposals` and `armature adapters`, run as a user runs them, over a store seeded
with what the improvement and fine-tune loops keep (the loops themselves are tested end to end
in tests/workflows)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from armature_temporal.finetune.models import Adapter, TrainReport
from armature_temporal.improve.models import Proposal, SpecChange
from armature_temporal.store import TraceStore
from armature_temporal.store.engine import database_url
from cli import app

runner = CliRunner()
BASE = "name: s\nstages: [{id: a, role: {name: A, model_tier: small, description: x}}]\n"


def _seed(tmp_path: Path) -> None:
    proposal = Proposal(
        id="s-p1",
        spec_name="s",
        improve_run_id="improve-s-1",
        created_at="2026-11-30T08:00:00+00:00",
        base_spec_hash="a" * 64,
        candidate_spec_hash="b" * 64,
        changes=[SpecChange(stage="a", field="model_tier", old="small", new="frontier", why="w")],
        baseline_hqs=[0.5, 0.6],
        candidate_hqs=[0.5, 0.55],
        delta=-0.025,
        ci_low=-0.05,
        ci_high=0.0,
        verdict="not_better",
        detail="not shown to help",
        diff="--- a/s.yaml\n+++ b/s.yaml\n",
        spec_text=BASE.replace("small", "frontier"),
        base_spec_text=BASE,
    )
    report = TrainReport(
        adapter_dir=str(tmp_path / "ad"),
        steps=10,
        train_examples=8,
        eval_examples=2,
        train_loss_first=5.0,
        train_loss_last=2.0,
        eval_loss_before=5.0,
        eval_loss_after=2.5,
        seconds=1.0,
        device="cpu",
    )
    adapter = Adapter(
        id="s-a-a1",
        spec_name="s",
        stage="a",
        base_model="/m",
        path=str(tmp_path / "ad"),
        created_at="2026-11-30T08:00:00+00:00",
        finetune_run_id="finetune-s-1",
        examples=10,
        report=report,
        verdict="verified",
        detail="d",
    )
    store = TraceStore(database_url())
    try:
        store.save_proposals([proposal])
        store.save_adapters([adapter])
        store.save_adapters(
            [
                adapter.model_copy(
                    update={
                        "id": "s-b-a2",
                        "stage": "b",
                        "verdict": "insufficient_evidence",
                        "base_loss": 5.0,
                        "heldout_loss": 2.5,
                        "paired_diff": -0.0125,
                        "paired_ci_low": -0.05,
                        "paired_ci_high": 0.0,
                        "paired_n": 4,
                    }
                )
            ]
        )
    finally:
        store.close()


def test_proposals_list_show_refuse_an_unverified_apply_and_dismiss(tmp_path: Path) -> None:
    _seed(tmp_path)
    spec = tmp_path / "s.yaml"
    spec.write_text(BASE)
    listed = runner.invoke(app, ["proposals", "list"])
    assert listed.exit_code == 0 and "s-p1" in listed.stdout and "not_better" in listed.stdout
    as_json = json.loads(runner.invoke(app, ["proposals", "list", "--json"]).stdout)
    assert [p["id"] for p in as_json] == ["s-p1"] and "spec_text" not in as_json[0]
    shown = runner.invoke(app, ["proposals", "show", "s-p1"])
    assert "a.model_tier: small → frontier" in shown.stdout and "0.50→0.50" in shown.stdout
    refused = runner.invoke(app, ["proposals", "apply", "s-p1", str(spec)])
    assert refused.exit_code == 2 and "was not verified (not_better" in refused.stderr
    assert spec.read_text() == BASE, "a refused apply writes nothing"
    spec.write_text(BASE + "# edited since\n")
    moved = runner.invoke(app, ["proposals", "apply", "s-p1", str(spec), "--force"])
    assert moved.exit_code == 2 and "is not the text proposal s-p1 was made from" in moved.stderr
    assert runner.invoke(app, ["proposals", "dismiss", "s-p1"]).exit_code == 0
    again = runner.invoke(app, ["proposals", "dismiss", "s-p1"])
    assert again.exit_code == 2 and "already dismissed" in again.stderr
    unknown = runner.invoke(app, ["proposals", "show", "s-p2"])
    assert unknown.exit_code == 2 and "no proposal 's-p2'" in unknown.stderr
    assert "did you mean 's-p1'?" in unknown.stderr
    bad = runner.invoke(app, ["proposals", "list", "--status", "maybe"])
    assert bad.exit_code == 2 and "use proposed, applied or dismissed" in bad.stderr


def test_adapters_list_and_retire(tmp_path: Path) -> None:
    _seed(tmp_path)
    listed = runner.invoke(app, ["adapters", "list", "--spec", "s"])
    assert listed.exit_code == 0
    # Stored before the paired runs: its report's losses, no paired figures.
    assert (
        "s-a-a1  active  verified  loss 2.500 vs base 5.000  paired: not measured  "
        "trained on 8, held out 2" in listed.stdout
    )
    assert (
        "s-b-a2  active  insufficient_evidence  loss 2.500 vs base 5.000  "
        "paired HQS -0.013 [-0.050, +0.000] n=4  trained on 8, held out 2" in listed.stdout
    )
    as_json = runner.invoke(app, ["adapters", "list", "--spec", "s", "--stage", "b", "--json"])
    (row,) = json.loads(as_json.stdout)
    assert (row["verdict"], row["base_loss"], row["heldout_loss"]) == (
        "insufficient_evidence",
        5.0,
        2.5,
    )
    assert (row["paired_diff"], row["paired_ci_low"], row["paired_ci_high"], row["paired_n"]) == (
        -0.0125,
        -0.05,
        0.0,
        4,
    )
    assert runner.invoke(app, ["adapters", "retire", "s-a-a1"]).exit_code == 0
    store = TraceStore(database_url())
    try:
        assert store.latest_adapter("s", "a") is None  # `adapter: latest` no longer picks it
    finally:
        store.close()
    again = runner.invoke(app, ["adapters", "retire", "s-a-a1"])
    assert again.exit_code == 2 and "already retired" in again.stderr
    none = runner.invoke(app, ["adapters", "list", "--spec", "other"])
    assert "no adapters in the store" in none.stdout


def test_every_listing_of_a_spec_takes_its_file_or_its_name(tmp_path: Path) -> None:
    """`proposals list SPEC` was refused (it wanted --spec NAME) while `memory list SPEC` and
    `cache stats SPEC` took only a file and `dashboard` a name."""
    _seed(tmp_path)
    spec = tmp_path / "s.yaml"
    spec.write_text(BASE)
    for args in (["s"], [str(spec)], ["--spec", str(spec)], ["--spec", "s"]):
        listed = runner.invoke(app, ["proposals", "list", *args, "--json"])
        assert listed.exit_code == 0, (args, listed.output)
        assert [p["id"] for p in json.loads(listed.stdout)] == ["s-p1"], args
        adapters = runner.invoke(app, ["adapters", "list", *args, "--json"])
        assert adapters.exit_code == 0, (args, adapters.output)
        assert {a["id"] for a in json.loads(adapters.stdout)} == {"s-a-a1", "s-b-a2"}, args
    other = runner.invoke(app, ["proposals", "list", "nothing-here", "--json"])
    assert other.exit_code == 0 and json.loads(other.stdout) == []
    clash = runner.invoke(app, ["proposals", "list", "s", "--spec", "t"])
    assert clash.exit_code == 2 and "name different specs" in clash.stderr
    for command in (["memory", "list"], ["cache", "stats"]):
        for given in ("s", str(spec)):
            done = runner.invoke(app, [*command, given, "--json"])
            assert done.exit_code == 0, (command, given, done.output)


def test_apply_to_the_wrong_file_says_so_before_the_proposals_status(tmp_path: Path) -> None:
    """`proposals apply ID wrong.yaml` said "already applied"; the file is what is wrong."""
    _seed(tmp_path)
    store = TraceStore(database_url())
    try:
        store.set_proposal_status("s-p1", "applied")
    finally:
        store.close()
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(BASE.replace("name: s", "name: other"))
    done = runner.invoke(app, ["proposals", "apply", "s-p1", str(wrong), "--force"])
    assert done.exit_code == 2
    assert "is not the text proposal s-p1 was made from" in done.stderr
    assert "it is another spec ('other')" in done.stderr and "already" not in done.stderr
    right = tmp_path / "s.yaml"
    right.write_text(BASE.replace("small", "frontier"))  # the change is in it
    again = runner.invoke(app, ["proposals", "apply", "s-p1", str(right), "--force"])
    assert again.exit_code == 2 and f"already applied: {right} has its change" in again.stderr


def test_proposals_list_at_80_columns_shows_each_change_whole(tmp_path: Path) -> None:
    """At 80 columns the change column, last in one table, was squeezed to a few letters."""
    _seed(tmp_path)
    narrow = runner.invoke(app, ["proposals", "list"], env={"COLUMNS": "80"})
    assert narrow.exit_code == 0, narrow.output
    assert "a.model_tier: small → frontier" in narrow.stdout
    assert max(len(line) for line in narrow.stdout.splitlines()) <= 80
    assert "not_better" in narrow.stdout and "[-0.050, +0.000]" in narrow.stdout
