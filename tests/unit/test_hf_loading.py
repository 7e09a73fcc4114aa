"""Models loaded in several threads at once (a worker's activity thread pool) all come out
whole: transformers patches process-wide state while it loads (tie_weights a no-op, the meta
device), and without Armature's load lock a concurrent load left the tiny model's tied output
layer on the meta device ("Cannot copy out of meta tensor") — every load, here, and the
process stayed broken after (the patches restored out of order)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="the finetune extra is not installed")

from armature_temporal.experience.embeddings import local_available
from armature_temporal.finetune.tiny import create_tiny_model
from armature_temporal.finetune.train import load_base


def test_concurrent_loads_and_builds_all_come_out_whole(tmp_path: Path) -> None:
    base = create_tiny_model(tmp_path / "tiny")
    failures: list[str] = []
    loaded: list[int] = []

    def load_again(index: int) -> None:
        for round_ in range(4):
            try:
                if index == 0 and round_ % 2:  # a build from config meanwhile, as tests do
                    create_tiny_model(tmp_path / f"built-{round_}")
                    continue
                model, _ = load_base(str(base))
                model.to("cpu")  # what training does first; fails on meta weights
                if any(p.is_meta for p in model.parameters()):
                    failures.append(f"thread {index}: meta parameters after load")
                loaded.append(index)
            except Exception as exc:  # the failure this test is about, reported whole
                failures.append(f"thread {index}: {type(exc).__name__}: {exc}"[:200])

    threads = [threading.Thread(target=load_again, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert len(loaded) == 14  # 4 threads x 4 rounds, less thread 0's two builds


@pytest.mark.skipif(not local_available(), reason="the embed extra is not installed")
def test_the_embedding_model_loads_whole_while_a_base_model_loads(tmp_path: Path) -> None:
    from armature_temporal.experience.embeddings import LocalEmbedder, _local_model

    base = create_tiny_model(tmp_path / "tiny")
    _local_model.cache_clear()
    failures: list[str] = []

    def tiny() -> None:
        for _ in range(4):
            try:
                load_base(str(base))[0].to("cpu")
            except Exception as exc:
                failures.append(f"{type(exc).__name__}: {exc}"[:200])

    thread = threading.Thread(target=tiny)
    thread.start()
    vectors = LocalEmbedder().embed(["how do tides work", "why is the sea salty"])
    thread.join()
    assert failures == []
    assert len(vectors) == 2 and all(abs(sum(x * x for x in v) - 1.0) < 1e-4 for v in vectors)
