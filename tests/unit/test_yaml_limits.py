"""YAML alias bombs and oversized documents are refused, fast and small, on every path that
parses YAML: spec files, spec text, agent bundles and the spec editor (proposals apply)."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from armature_temporal.errors import SpecError
from armature_temporal.improve.edit import apply_changes
from armature_temporal.improve.models import SpecChange
from armature_temporal.spec.loader import MAX_SPEC_BYTES, load_spec, load_spec_text
from armature_temporal.spec.yaml_limits import MAX_ALIAS_NODES, MAX_NESTING

STAGES = "stages:\n  - id: a\n    role: {name: A, description: hello}\n"
BUNDLE_STAGE = "stages:\n  - id: a\n    agent: echo\n"


def laughs(levels: int, indent: str = "  ") -> str:
    """Anchors nine wide, each level nine aliases of the one before: 9**levels values."""
    lines = [f'{indent}l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels + 1):
        lines.append(f"{indent}l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def bomb_spec(levels: int) -> str:
    """About 700 bytes at 9 levels: the bomb sits in the tiers, where shared config lives."""
    return "name: bomb\nmodel_tiers:\n" + laughs(levels) + STAGES


@contextmanager
def bounded() -> Iterator[None]:
    """Refusal is cheap: a small, fixed amount of memory (unbounded, 6 levels took 10 s and
    162 MB; expanding even 9**5 values needs far more than the bound). Time is not asserted
    here (house rule: speed lives in benchmarks/); memory is the machine-independent proof."""
    tracemalloc.start()
    try:
        yield
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024, f"refusing used {peak} bytes at peak"


def refusal(load: Callable[[], object]) -> str:
    with bounded(), pytest.raises(SpecError) as info:
        load()
    return str(info.value)


LEVELS = pytest.mark.parametrize("levels", [6, 9])


@LEVELS
def test_billion_laughs_text_is_refused_at_the_alias(levels: int) -> None:
    text = bomb_spec(levels)
    assert len(text) < 800
    message = refusal(lambda: load_spec_text(text, "bomb.yaml"))
    # l4 is the first level whose nine aliases add more than the limit: line 7, its first alias.
    assert message.startswith("bomb.yaml:7:")
    assert "expands through YAML aliases to" in message
    assert f"(limit {MAX_ALIAS_NODES})" in message and "*l3" in message
    assert "write the repeated values out" in message


@LEVELS
def test_billion_laughs_file_is_refused(tmp_path: Path, levels: int) -> None:
    spec = tmp_path / "bomb.yaml"
    spec.write_text(bomb_spec(levels))
    message = refusal(lambda: load_spec(spec))
    assert f"{spec}:7:" in message and "expands through YAML aliases" in message


@LEVELS
def test_billion_laughs_in_a_subagent_spec_is_refused(tmp_path: Path, levels: int) -> None:
    (tmp_path / "child.yaml").write_text(bomb_spec(levels))
    spec = tmp_path / "parent.yaml"
    spec.write_text("name: parent\nstages:\n  - id: fan\n    subagent_spec: child.yaml\n")
    message = refusal(lambda: load_spec(spec))
    assert "child.yaml:7:" in message and "expands through YAML aliases" in message


@LEVELS
def test_billion_laughs_in_an_agent_bundle_is_refused(tmp_path: Path, levels: int) -> None:
    bundle = "role: {name: Echo, description: hi}\nextras:\n" + laughs(levels)
    (tmp_path / "agent.yaml").write_text(bundle)
    spec = tmp_path / "s.yaml"
    spec.write_text("name: s\nagent_library:\n  echo: {path: agent.yaml}\n" + BUNDLE_STAGE)
    message = refusal(lambda: load_spec(spec))
    assert "agent bundle 'agent.yaml', line 7, column" in message
    assert "expands through YAML aliases" in message


@LEVELS
def test_billion_laughs_stored_spec_is_refused_by_proposals_apply(levels: int) -> None:
    """``proposals apply`` edits the stored spec text: it parses it before any check."""
    text = "name: bomb\nstages:\n  - id: a\n    role: {name: A, description: hello}\n"
    text += "x_shared:\n" + laughs(levels)
    edit = SpecChange(stage="a", field="temperature", old=None, new=0.2, why="traces")
    message = refusal(lambda: apply_changes(text, [edit], filename="stored.yaml"))
    assert "stored.yaml:" in message and "expands through YAML aliases" in message


def test_aliases_repeating_long_text_are_refused() -> None:
    """Few nodes, much text: a 30 KB block aliased a hundred times would be 3 MB of prompts."""
    text = "name: big\nx_long: &t " + "a" * 30_000 + "\n" + STAGES
    text += "x_copies: [" + ", ".join(["*t"] * 100) + "]\n"
    with pytest.raises(SpecError) as info:  # (parsing 30 KB of YAML is the slow part here)
        load_spec_text(text, "big.yaml")
    message = str(info.value)
    assert "characters of text at *t" in message and "(limit 2097152)" in message


def test_recursive_alias_is_refused_where_it_is() -> None:
    message = refusal(lambda: load_spec_text("name: x\nstages: &s\n  - *s\n", "spec.yaml"))
    assert message.startswith("spec.yaml:3:5: recursive YAML alias *s")


def test_oversized_spec_text_is_refused_before_parsing() -> None:
    text = "name: big\n" + STAGES + "# " + "x" * MAX_SPEC_BYTES + "\n"
    message = refusal(lambda: load_spec_text(text, "big.yaml"))
    assert message.startswith(f"big.yaml: text is over {MAX_SPEC_BYTES} bytes")
    assert f"specs are limited to {MAX_SPEC_BYTES} bytes" in message


def test_spec_text_cap_counts_utf8_bytes() -> None:
    """1.5 M characters of 2-byte text is 3 MB: over the cap though under it in characters."""
    text = "name: big\n" + STAGES + "# " + "é" * (MAX_SPEC_BYTES * 3 // 4) + "\n"
    with pytest.raises(SpecError) as info:
        load_spec_text(text, "big.yaml")
    assert f"specs are limited to {MAX_SPEC_BYTES} bytes" in str(info.value)


def test_legitimate_shared_tier_config_and_roles_still_load() -> None:
    text = """\
name: shared
model_tiers:
  small: &tier {provider: simulate, model: sim-small, temperature: 0.3, valid_rate: 0.9}
  frontier: {<<: *tier, model: sim-large}
stages:
  - id: a
    role: {name: A, description: hello, model_tier: small}
  - id: b
    depends_on: [a]
    role: &reviewer
      name: Reviewer
      description: Review the draft carefully.
      model_tier: frontier
  - id: c
    depends_on: [a]
    role: *reviewer
"""
    loaded = load_spec_text(text, "shared.yaml")
    tiers = loaded.spec.model_tiers
    assert tiers["frontier"].model == "sim-large" and tiers["frontier"].temperature == 0.3
    roles = [s.role for s in loaded.spec.stages]
    assert roles[1] == roles[2] and roles[1] is not None and roles[1].name == "Reviewer"


def test_many_small_aliases_within_the_limit_load() -> None:
    """Fifty stages sharing one role block (a common layout) stay far under the limit."""
    stages = "".join(f"  - id: s{i}\n    role: *r\n" for i in range(50))
    text = "name: many\nstages:\n  - id: base\n    role: &r {name: R, description: hi}\n" + stages
    loaded = load_spec_text(text, "many.yaml")
    assert len(loaded.spec.stages) == 51


def test_deep_nesting_is_refused_where_it_starts(tmp_path: Path) -> None:
    deep = "[" * 3000 + "]" * 3000
    message = refusal(lambda: load_spec_text(f"name: x\nx: {deep}\n" + STAGES, "deep.yaml"))
    assert message.startswith("deep.yaml:2:")
    assert f"nests deeper than {MAX_NESTING} levels" in message


def test_deep_nesting_in_an_agent_bundle_is_a_spec_error_not_a_crash(tmp_path: Path) -> None:
    """The bundle reader used to let ruamel's RecursionError out of ``load_spec``."""
    (tmp_path / "agent.yaml").write_text(
        "role: {name: Echo, description: hi}\nx: " + "[" * 3000 + "]" * 3000 + "\n"
    )
    spec = tmp_path / "s.yaml"
    spec.write_text("name: s\nagent_library:\n  echo: {path: agent.yaml}\n" + BUNDLE_STAGE)
    message = refusal(lambda: load_spec(spec))
    assert "agent bundle 'agent.yaml', line 2" in message and "nests deeper" in message


def test_nesting_a_json_schema_needs_still_loads() -> None:
    schema = "{type: object, properties: {a: " * 20 + "{type: string}" + "}}" * 20
    text = f"name: x\nstages:\n  - id: a\n    output_mode: json\n    output_schema: {schema}\n"
    loaded = load_spec_text(text + "    role: {name: A, description: hello}\n", "ok.yaml")
    assert loaded.spec.stages[0].output_schema is not None
