"""Which files a ``knowledge add`` names, and their text.

A source is a file, a directory (its text, Markdown and HTML files, recursively, hidden ones
left out) or a glob. A file that cannot be read — missing, not UTF-8 text, too big, a device —
is reported with its path and the reason, and the rest are read.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from armature_temporal.knowledge.chunking import html_text

__all__ = ["MAX_FILE_BYTES", "TEXT_SUFFIXES", "Document", "Unreadable", "read_sources"]

#: The file types a directory or glob contributes.
TEXT_SUFFIXES = (".md", ".markdown", ".txt", ".rst", ".html", ".htm")
MAX_FILE_BYTES = 5_000_000


@dataclass(frozen=True)
class Document:
    """A readable source: its name (the path as given or found), its text."""

    source: str
    text: str


@dataclass(frozen=True)
class Unreadable:
    """A source that could not be read, and why."""

    source: str
    reason: str


def _files(given: str) -> Iterator[Path | Unreadable]:
    if given.lower().startswith(("http://", "https://")):
        yield Unreadable(
            given,
            "a web page: list it in a spec's knowledge.sources, where the spec's "
            "http_allow_hosts decides whether it may be fetched",
        )
        return
    path = Path(given).expanduser()
    if any(c in given for c in "*?["):
        found = sorted(glob.glob(os.path.expanduser(given), recursive=True))
        if not found:
            yield Unreadable(given, "the pattern matches no file")
        for name in found:
            if Path(name).is_file():
                yield Path(name)
        return
    if path.is_dir():
        found_any = False
        for root, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in sorted(files):
                if not name.startswith(".") and name.lower().endswith(TEXT_SUFFIXES):
                    found_any = True
                    yield Path(root) / name
        if not found_any:
            yield Unreadable(given, f"the directory holds no {'/'.join(TEXT_SUFFIXES)} file")
        return
    yield path


def _read(path: Path) -> Document | Unreadable:
    name = str(path)
    try:
        info = path.stat()
        if not path.is_file():
            return Unreadable(name, "not a regular file")
        if info.st_size > MAX_FILE_BYTES:
            return Unreadable(name, f"{info.st_size:,} bytes, more than {MAX_FILE_BYTES:,}")
        raw = path.read_bytes()
    except FileNotFoundError:
        return Unreadable(name, "no such file")
    except PermissionError:
        return Unreadable(name, "permission denied")
    except OSError as exc:
        return Unreadable(name, exc.strerror or str(exc))
    if b"\0" in raw[:8192]:
        return Unreadable(name, "binary, not text")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Unreadable(name, f"not UTF-8 text ({exc.reason} at byte {exc.start})")
    if path.suffix.lower() in (".html", ".htm"):
        text = html_text(text)
    if not text.strip():
        return Unreadable(name, "empty")
    return Document(name, text)


def read_sources(given: Iterable[str]) -> Iterator[Document | Unreadable]:
    """Each file the sources name, read (or why not), in order, each once."""
    seen: set[str] = set()
    for source in given:
        for item in _files(source):
            if isinstance(item, Unreadable):
                yield item
                continue
            key = str(item.resolve()) if item.exists() else str(item)
            if key in seen:
                continue
            seen.add(key)
            yield _read(item)
