"""``armature knowledge`` as a newcomer meets it: a search before any index says how to build
one; add indexes a folder, names the file it could not read and why (exit 1) and indexes the
rest; list and search answer in JSON with each chunk's provenance and hash; --source limits a
search to sources matching globs; rebuild indexes a collection again; removing a source that
is not there names the ones that are."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def armature(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(REPO / "cli.py"), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=180,
    )


def test_add_list_search_remove_from_the_cli(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "tides.md").write_text(
        "# Tides\n\n## Spring tides\nWhen the Sun and Moon line up, their pulls add up.\n"
    )
    (docs / "neap.md").write_text("# Neap tides\n\nAt quarter moons the Sun and Moon pull apart.\n")
    (docs / "bad.txt").write_bytes(b"\xff\xfe")

    before = armature("knowledge", "search", "tides")
    assert before.returncode == 1
    assert "nothing indexed yet" in before.stderr and "armature knowledge add" in before.stderr

    # the lexical embedder: no model to load (the local one is tested in tests/store)
    added = armature(
        "knowledge", "add", str(docs), "--collection", "notes", "--embedder", "lexical"
    )
    assert added.returncode == 1, added.stderr  # one file was unreadable
    assert f"{docs / 'bad.txt'}: not UTF-8 text" in added.stderr
    assert "2 indexed (2 chunks)" in added.stdout and "1 unreadable" in added.stdout
    assert "embedder lexical" in added.stdout

    listed = json.loads(armature("knowledge", "list", "--json").stdout)
    assert [(s["collection"], Path(s["source"]).name, s["chunks"]) for s in listed] == [
        ("notes", "neap.md", 1),
        ("notes", "tides.md", 1),
    ]
    search = ("knowledge", "search", "sun and moon", "-c", "notes", "--json")
    assert len(json.loads(armature(*search).stdout)) == 2
    found = armature(*search, "--source", "*/tides.md", "--source", "*/none-*")
    assert found.returncode == 0, found.stderr
    (hit,) = json.loads(found.stdout)
    assert hit["ref"] == f"knowledge:{docs / 'tides.md'}#0"
    assert hit["heading"] == "Tides > Spring tides" and len(hit["sha256"]) == 64
    nothing = armature(*search[:-1], "--source", "*.pdf")
    assert nothing.returncode == 0, nothing.stderr
    assert "matches 'sun and moon' among sources matching ['*.pdf']" in nothing.stdout

    missing = armature("knowledge", "remove", "nope.md", "-c", "notes")
    assert missing.returncode == 1 and "tides.md" in missing.stderr
    removed = armature("knowledge", "remove", str(docs / "tides.md"), "-c", "notes")
    assert removed.returncode == 0, removed.stderr
    listed = json.loads(armature("knowledge", "list", "--json").stdout)
    assert [Path(s["source"]).name for s in listed] == ["neap.md"]
    rebuilt = armature("knowledge", "rebuild", "-c", "notes", "--embedder", "lexical")
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert "rebuilt: 1 sources, 1 chunks" in rebuilt.stdout and "neap.md" in rebuilt.stderr
