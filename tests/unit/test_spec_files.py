"""The files a spec names stay in its folder tree, and are read with a cap (issue #25, item 8).

``context_layers[].src``, ``skill_library.*.path``, ``agent_library.*.path`` and
``stages[].subagent_spec`` resolve (``..`` collapsed, symlinks followed) inside the top-level
spec's folder, or a folder ``$ARMATURE_SPEC_ROOTS`` lists; never in ``/proc``, ``/sys``,
``/dev`` or what tools may not see (``$ARMATURE_HOME``); only regular files (a FIFO would block
the loader), sized by reading (``/proc`` files say 0).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from armature_temporal.errors import SpecError
from armature_temporal.spec import resources
from armature_temporal.spec.compiler import compile_spec
from armature_temporal.spec.loader import load_spec, load_spec_text

SECRET = "SECRET-7f3a"

LAYER = """\
name: leak
context_layers:
  - name: doc
    src: {src}
context_policy: {{must: [doc]}}
stages:
  - id: s
    role: {{name: R, description: hi}}
"""


def write_spec(folder: Path, text: str, name: str = "spec.yaml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    spec = folder / name
    spec.write_text(text)
    return spec


def issues(spec: Path) -> list[str]:
    with pytest.raises(SpecError) as info:
        load_spec(spec)
    return [str(i) for i in info.value.issues]


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    """A spec folder and, beside it, a folder with a secret in it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text(SECRET)
    return tmp_path / "specs" / "team", outside


@pytest.mark.parametrize(
    "src",
    ["../../outside/secret.md", "{outside}/secret.md", "sub/../../../outside/secret.md"],
)
def test_a_layer_outside_the_spec_folder_is_refused_with_where_and_the_fix(
    tree: tuple[Path, Path], src: str
) -> None:
    folder, outside = tree
    (folder / "sub").mkdir(parents=True)
    spec = write_spec(folder, LAYER.format(src=src.format(outside=outside)))
    (issue,) = issues(spec)
    assert issue.startswith(f"{spec}:4:5: context_layers[0].src: '{src.format(outside=outside)}'")
    assert f"is outside the spec's folder {str(folder)!r}" in issue
    assert "move or copy the file under that folder" in issue and "ARMATURE_SPEC_ROOTS" in issue
    assert SECRET not in issue


def test_a_symlink_in_the_spec_folder_that_leads_out_is_refused(tree: tuple[Path, Path]) -> None:
    folder, outside = tree
    spec = write_spec(folder, LAYER.format(src="notes.md"))
    (folder / "notes.md").symlink_to(outside / "secret.md")
    (issue,) = issues(spec)
    assert f"'notes.md' (that is '{outside / 'secret.md'}') is outside" in issue
    (folder / "notes.md").unlink()
    (folder / "shared").symlink_to(outside)  # a linked folder too
    spec.write_text(LAYER.format(src="shared/secret.md"))
    (issue,) = issues(spec)
    assert "context_layers[0].src" in issue and "is outside the spec's folder" in issue


def test_paths_that_stay_inside_load_whatever_their_spelling(tree: tuple[Path, Path]) -> None:
    folder, _ = tree
    (folder / "layers").mkdir(parents=True)
    (folder / "layers" / "a.md").write_text("the layer text")
    (folder / "alias.md").symlink_to("layers/a.md")
    for src in ("layers/a.md", "layers/../layers/a.md", "./layers//a.md", "alias.md"):
        spec = write_spec(folder, LAYER.format(src=src))
        (layer,) = load_spec(spec).spec.context_layers
        assert layer.content == "the layer text", src


def test_the_trace_key_is_refused_even_inside_the_spec_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spec kept in $HOME has ~/.armature inside its tree; what tools may not see, a spec
    may not read either."""
    home = tmp_path / "home"
    (home / ".armature").mkdir(parents=True)
    (home / ".armature" / "trace.key").write_text(SECRET)
    monkeypatch.setenv("ARMATURE_HOME", str(home / ".armature"))
    spec = write_spec(
        home,
        "name: k\nskill_library:\n  key: {path: .armature/trace.key}\n"
        "stages:\n  - id: s\n    role: {name: R, description: hi, skills: [key]}\n",
    )
    (issue,) = issues(spec)
    assert issue.startswith(f"{spec}:3:9: skill_library.key.path: '.armature/trace.key'")
    assert f"is inside {str(home / '.armature')!r}" in issue and SECRET not in issue


@pytest.mark.parametrize(
    ("src", "why"),
    [
        ("/proc/self/environ", "is in /proc, a kernel file system"),
        ("/proc/self/status", "is in /proc, a kernel file system"),
        ("/sys/kernel/uevent_seqnum", "is in /sys, a kernel file system"),
        ("/dev/zero", "is a device, not a regular file"),
        ("/dev/null", "is a device, not a regular file"),
    ],
)
def test_kernel_files_and_devices_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, src: str, why: str
) -> None:
    monkeypatch.setenv("ARMATURE_SPEC_ROOTS", "/")  # even where every folder is allowed
    spec = write_spec(tmp_path / "s", LAYER.format(src=src))
    (issue,) = issues(spec)
    assert "context_layers[0].src" in issue and why in issue, issue


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    spec = write_spec(folder, LAYER.format(src="pipe.md"))
    os.mkfifo(folder / "pipe.md")  # opening it to read would wait for a writer forever
    (issue,) = issues(spec)
    from armature_temporal.spec.files import SpecFileRefused, read_capped

    assert "context_layers[0].src: 'pipe.md'" in issue and "is a FIFO, not a regular file" in issue
    with pytest.raises(SpecFileRefused, match="a FIFO"):
        read_capped(folder / "pipe.md", 100)  # the descriptor check, past a swapped-in FIFO


def test_a_directory_or_a_missing_file_says_what_it_is(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    (folder / "dir.md").mkdir(parents=True)
    spec = write_spec(folder, LAYER.format(src="dir.md"))
    assert "is a directory, not a regular file" in issues(spec)[0]
    spec.write_text(LAYER.format(src="gone.md"))
    assert f"file {str(folder / 'gone.md')!r} does not exist" in issues(spec)[0]
    # A file outside is refused as outside, whether it exists or not: no probing.
    spec.write_text(LAYER.format(src="../nowhere.md"))
    assert "is outside the spec's folder" in issues(spec)[0]


def test_proc_files_say_size_0_so_the_size_is_counted_by_reading(tmp_path: Path) -> None:
    from armature_temporal.spec.files import SpecFileRefused, read_capped

    status = Path(os.path.realpath("/proc/self/status"))  # /proc/<pid>/status
    assert status.stat().st_size == 0 and len(status.read_bytes()) > 64
    with pytest.raises(SpecFileRefused, match="is over 64 bytes \\(counted by reading it\\)"):
        read_capped(status, 64)
    assert read_capped(status, 1 << 20).startswith("Name:")


def test_a_layer_over_the_cap_is_refused_and_one_at_the_cap_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(resources, "MAX_RESOURCE_BYTES", 100)
    folder = tmp_path / "s"
    spec = write_spec(folder, LAYER.format(src="big.md"))
    (folder / "big.md").write_text("x" * 101)
    (issue,) = issues(spec)
    assert "'big.md' is over 100 bytes" in issue
    (folder / "big.md").write_text("x" * 100)
    assert load_spec(spec).spec.context_layers[0].content == "x" * 100


def test_a_path_swapped_for_a_symlink_after_the_check_is_refused(tree: tuple[Path, Path]) -> None:
    from armature_temporal.spec.files import SpecFileRefused, SpecRoots, read_capped, spec_file_path

    folder, outside = tree
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "secret.md").write_text("inside")
    real = spec_file_path(SpecRoots.of(folder), folder, "sub/secret.md")
    (folder / "sub").rename(folder / "old")
    (folder / "sub").symlink_to(outside)  # the race: same path, now leading out
    with pytest.raises(SpecFileRefused, match="changed while it was read"):
        read_capped(real, 100)


def test_skill_agent_and_subagent_files_are_confined_too(tree: tuple[Path, Path]) -> None:
    folder, outside = tree
    (outside / "agent.yaml").write_text("role: {name: Spy, description: " + SECRET + "}\n")
    (outside / "child.yaml").write_text(
        "name: child\nstages:\n  - id: c\n    role: {name: C, description: " + SECRET + "}\n"
    )
    spec = write_spec(
        folder,
        f"""\
name: many
skill_library:
  s1: {{path: ../../outside/secret.md}}
agent_library:
  spy: {{path: {outside}/agent.yaml}}
stages:
  - id: a
    agent: spy
  - id: b
    role: {{name: R, description: hi, skills: [s1]}}
  - id: c
    subagent_spec: ../../outside/child.yaml
    fan_out: 2
""",
    )
    found = issues(spec)
    assert [re.sub(r": '.*", "", i).split(": ", 1)[1] for i in found] == [
        "skill_library.s1.path",
        "stages[0].agent",
        "stages[2].subagent_spec",
    ], found
    assert all("is outside the spec's folder" in i for i in found), found
    assert not any(SECRET in i for i in found)


def test_a_child_spec_may_use_files_anywhere_in_the_top_spec_folder(tmp_path: Path) -> None:
    top = tmp_path / "project"
    (top / "workflows").mkdir(parents=True)
    (top / "layers").mkdir()
    (top / "layers" / "glossary.md").write_text("shared words")
    (top / "workflows" / "child.yaml").write_text(
        "name: child\ncontext_layers:\n  - {name: g, src: ../layers/glossary.md}\n"
        "context_policy: {must: [g]}\nstages:\n  - id: c\n    role: {name: C, description: x}\n"
    )
    spec = write_spec(
        top,
        "name: top\nstages:\n  - id: f\n    subagent_spec: workflows/child.yaml\n    fan_out: 2\n",
    )
    loaded = load_spec(spec)
    assert loaded.children["f"].spec.context_layers[0].content == "shared words"
    # The same child loaded on its own is confined to its own folder.
    with pytest.raises(SpecError, match="is outside the spec's folder"):
        load_spec(top / "workflows" / "child.yaml")


def test_armature_spec_roots_adds_a_shared_folder(
    tree: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, outside = tree
    spec = write_spec(folder, LAYER.format(src="../../outside/secret.md"))
    monkeypatch.setenv("ARMATURE_SPEC_ROOTS", f"/nonexistent{os.pathsep}{outside}")
    assert compile_spec(load_spec(spec)).name == "leak"
    monkeypatch.setenv("ARMATURE_SPEC_ROOTS", f"{outside}/../outside")  # spelled any way
    assert load_spec(spec).spec.context_layers[0].content == SECRET
    monkeypatch.setenv("ARMATURE_SPEC_ROOTS", "relative/dir")
    (issue,) = issues(spec)
    assert "ARMATURE_SPEC_ROOTS='relative/dir' has the relative path 'relative/dir'" in issue
    monkeypatch.setenv("ARMATURE_SPEC_ROOTS", "/proc")  # never the kernel's files
    spec.write_text(LAYER.format(src="/proc/self/environ"))
    assert "a kernel file system" in issues(spec)[0]


def test_spec_text_is_confined_to_its_base_dir(tree: tuple[Path, Path]) -> None:
    """load_spec_text (the improvement loop loads edited specs so) confines to base_dir."""
    folder, _ = tree
    folder.mkdir(parents=True)
    with pytest.raises(SpecError, match="is outside the spec's folder"):
        load_spec_text(LAYER.format(src="../../outside/secret.md"), "edited.yaml", folder)
