"""The README's references are generated from the code; this keeps them in sync."""

from __future__ import annotations

from pathlib import Path

from armature_temporal.spec.docgen import cli_reference, replace_block, spec_reference

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_spec_and_cli_references_match_the_code() -> None:
    text = README.read_text(encoding="utf-8")
    expected = replace_block(text, "spec-reference", spec_reference())
    expected = replace_block(expected, "cli-reference", cli_reference())
    assert text == expected, (
        "README is stale: run python -m armature_temporal.spec.docgen README.md"
    )


def test_every_spec_field_is_documented() -> None:
    from armature_temporal.spec import models as spec

    text = README.read_text(encoding="utf-8")
    for model in (spec.Spec, spec.Stage, spec.Role, spec.ModelTier, spec.Gate, spec.SafetyRule):
        for name, info in model.model_fields.items():
            assert f"| `{name}` |" in text, f"{model.__name__}.{name} missing from README"
            assert info.description, f"{model.__name__}.{name} has no description"


def test_readme_has_the_two_setup_commands() -> None:
    text = README.read_text(encoding="utf-8")
    assert "<!-- ci:install -->" in text and "armature submit specs/quickstart.yaml" in text
    assert "<!-- ci:test -->" in text and "pytest" in text


def test_every_yaml_example_in_the_readme_is_a_valid_spec() -> None:
    import re

    from armature_temporal.spec.loader import load_spec_text

    text = README.read_text(encoding="utf-8")
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.S)
    assert blocks, "the README shows no spec"
    # `armature eval`'s cases files are YAML too, and say so on their first line.
    cases = [b for b in blocks if b.startswith("# specs/evals/")]
    assert cases, "the Evaluations section shows no cases file"
    for block in blocks:
        if block in cases:
            continue
        assert load_spec_text(block, "README.md").spec.stages
