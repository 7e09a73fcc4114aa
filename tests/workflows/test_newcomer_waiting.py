"""What a newcomer reads in the README (issue 13, point 18): the CLI reference writes boolean
pairs as they are typed (``--wait/--no-wait``), and the ``temporal workflow signal`` example says
how to reach a dev server on another port.
"""

from __future__ import annotations

from tests.fakes import SPECS

README = SPECS.parent / "README.md"


# --- point 18: the README ------------------------------------------------------------------------


def test_cli_reference_writes_boolean_pairs_as_they_are_typed() -> None:
    from armature_temporal.spec.docgen import cli_reference

    reference = cli_reference()
    assert "- `--wait/--no-wait`: Wait for the round and print it." in reference
    readme = README.read_text(encoding="utf-8")
    assert "- `--wait/--no-wait`: Wait for the round and print it." in readme
    assert "- `--wait`: Wait for the round" not in readme


def test_readme_signal_example_names_the_address_of_a_moved_dev_server() -> None:
    readme = README.read_text(encoding="utf-8")
    start_at = readme.index("temporal workflow signal --workflow-id")
    example = readme[start_at - 400 : start_at + 800]
    assert "--address" in example and "ARMATURE_DEV_PORT" in example
