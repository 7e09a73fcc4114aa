"""`armature cache stats|clear`, in process against the store under the test's ARMATURE_HOME:
stats count entries by status, hits exact and semantic, the saved cost and show recent hits
with the task asked beside the task reused; clear drops a stage's or the spec's entries; an
unknown stage is a usage error naming the stages."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from armature_temporal.cache.models import CacheEntry
from armature_temporal.store import TraceStore
from cli import app

runner = CliRunner()
SPEC = Path(__file__).resolve().parents[2] / "specs" / "quickstart.yaml"


def cache(*args: str) -> tuple[int, str, str]:
    got = runner.invoke(app, ["cache", *args])
    return got.exit_code, got.stdout, got.stderr


def seed(spec_name: str) -> None:
    store = TraceStore()
    for n, stage in enumerate(["draft", "draft", "review"]):
        store.put_cache_entry(
            CacheEntry(
                id=f"e{n}",
                spec_name=spec_name,
                spec_hash="h",
                stage_id=stage,
                tier="small",
                exact_key=f"k{n}",
                partition="p",
                task=f"Write about topic {n}",
                run_id=f"r{n}",
                cost_usd=0.02,
                created_at=f"2026-12-01T00:00:0{n}+00:00",
                expires_at="2999-01-01T00:00:00+00:00",
            )
        )
        store.settle_cache(f"r{n}", reason=None if n < 2 else "the run ended failed")
    source = store.cache_entry("e0")
    assert source is not None
    store.record_cache_hit(
        entry=source, run_id="r7", stage_id="draft", attempt_key="1/1", kind="exact",
        similarity=1.0, task="Write about topic 0",
    )  # fmt: skip
    store.close()


def test_stats_and_clear(armature_home: Path) -> None:
    name = "quickstart"
    seed(name)
    code, stdout, stderr = cache("stats", str(SPEC), "--json")
    assert code == 0, stderr
    stats = json.loads(stdout)
    assert stats["entries"] == {"servable": 2, "pending": 0, "withheld": 1, "expired": 0}
    assert stats["hits"] == {"exact": 1, "semantic": 0, "all": 1}
    assert stats["saved_cost_usd"] == 0.02
    assert stats["withheld_reasons"] == {"the run ended failed": 1}
    assert stats["sample"][0]["source_run"] == "r0"
    code, stdout, _ = cache("stats", str(SPEC))
    assert code == 0 and "1 exact, 0 semantic" in stdout and "saved $0.0200" in stdout
    code, _, stderr = cache("clear", str(SPEC), "--stage", "nope")
    assert code == 2 and "no LLM stage" in stderr
    code, stdout, _ = cache("clear", str(SPEC), "--stage", "draft", "--json")
    assert code == 0 and json.loads(stdout)["cleared"] == 2
    code, stdout, _ = cache("clear", str(SPEC))
    assert code == 0 and "cleared 1 cache entry" in stdout
    assert TraceStore().cache_entries(name) == []
