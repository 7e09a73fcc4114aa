"""How to install one of Armature's extras, said the way this copy was installed.

From a clone (``pip install -e .``) the hint is ``pip install -e '<clone>[serve]'`` (``.`` when
the clone is the working directory); from a package index it is
``pip install 'armature-temporal[serve]'``. pip records which in the installed distribution's
``direct_url.json`` (PEP 610).
"""

from __future__ import annotations

import json
import os
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

__all__ = ["DISTRIBUTION", "install_extra_hint"]

DISTRIBUTION = "armature-temporal"


def install_extra_hint(extra: str, *, cwd: Path | None = None) -> str:
    """The pip command that adds ``extra`` to this installation."""
    source = _local_source()
    if source is None:
        return f"pip install '{DISTRIBUTION}[{extra}]'"
    path, editable = source
    here = (cwd or Path.cwd()).resolve()
    # The clone as the user would type it from here: ".", a path inside, else absolute.
    shown = os.path.relpath(path, here) if path.is_relative_to(here) else str(path)
    return f"pip install {'-e ' if editable else ''}'{shown}[{extra}]'"


def _local_source() -> tuple[Path, bool] | None:
    """(directory, editable) when Armature was installed from a local directory, else None.

    pip's record (``direct_url.json``) says so; without one (an ``.egg-info`` in the clone
    shadows the installed metadata when Python runs from the clone), a package imported from
    a directory whose ``pyproject.toml`` is Armature's is a clone installed editable.
    """
    for dist in metadata.distributions(name=DISTRIBUTION):
        text = dist.read_text("direct_url.json")
        if not text:
            continue
        try:
            info = json.loads(text)
        except ValueError:
            continue
        url = urlparse(str(info.get("url", "")))
        dir_info = info.get("dir_info")
        if url.scheme == "file" and isinstance(dir_info, dict):
            return Path(unquote(url.path)).resolve(), bool(dir_info.get("editable"))
        return None
    root = Path(__file__).resolve().parent.parent
    project = root / "pyproject.toml"
    if project.is_file() and f'name = "{DISTRIBUTION}"' in project.read_text(encoding="utf-8"):
        return root, True
    return None
