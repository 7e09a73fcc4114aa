"""The template sandbox is a security boundary: Armature needs a jinja2 without the known
sandbox escapes (>=3.1.6, CVE-2025-27516), says so in its metadata, and refuses an older one."""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from pathlib import Path

import jinja2
import pytest

from armature_temporal.errors import ArmatureError
from armature_temporal.spec import templating
from armature_temporal.spec.templating import MIN_JINJA2, environment, render

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


@pytest.fixture
def fresh_environment() -> Iterator[None]:
    environment.cache_clear()
    yield
    environment.cache_clear()


def test_pyproject_requires_jinja2_3_1_6() -> None:
    deps = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    assert "jinja2>=3.1.6" in deps
    assert MIN_JINJA2 == (3, 1, 6)


@pytest.mark.parametrize("old", ["3.1.5", "3.1.4", "3.0.3", "2.11.3"])
def test_an_older_jinja2_is_refused_with_the_fix(
    monkeypatch: pytest.MonkeyPatch, fresh_environment: None, old: str
) -> None:
    monkeypatch.setattr(jinja2, "__version__", old)
    with pytest.raises(ArmatureError) as info:
        templating.environment()
    message = str(info.value)
    assert f"jinja2 {old} is installed" in message and "CVE-2025-27516" in message
    assert "pip install 'jinja2>=3.1.6'" in message


@pytest.mark.parametrize("new", ["3.1.6", "3.2.0", "3.2.0.dev1", "4.0"])
def test_a_current_jinja2_is_accepted(
    monkeypatch: pytest.MonkeyPatch, fresh_environment: None, new: str
) -> None:
    monkeypatch.setattr(jinja2, "__version__", new)
    assert templating.environment() is not None


def test_attr_filter_cannot_reach_str_format_past_the_sandbox() -> None:
    """CVE-2025-27516: before 3.1.6 ``|attr("format")`` returned the raw ``str.format``, so a
    format string walked to ``__class__`` and beyond; the sandbox must stop it."""
    out = render('{{ "{0.__class__.__mro__}"|attr("format")(1) }}', {})
    assert "class" not in out
