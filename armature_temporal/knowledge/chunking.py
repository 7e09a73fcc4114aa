"""Documents into chunks: by structure first (a Markdown heading outside fenced code, an
HTML heading, a blank line between paragraphs), then by words where a section is longer than
``size``, each window overlapping the one before by ``overlap`` words so a fact cut at a
boundary is whole in one of them. Every chunk keeps the heading it sits under (``Setup >
Tokens``), which a search shows and a prompt cites."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from html.parser import HTMLParser

__all__ = ["Chunk", "chunk_text", "html_text"]

#: Words per chunk, and the words two neighbouring windows of one section share.
DEFAULT_SIZE = 200
DEFAULT_OVERLAP = 40

_MD_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class Chunk:
    """One piece of a document: its place (``ord``), the headings above it, its text and the
    sha256 of that text."""

    ord: int
    heading: str
    text: str

    @property
    def hash(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()


class _Html(HTMLParser):
    """Text of an HTML page, headings as Markdown headings; script and style dropped."""

    BLOCK = frozenset({"p", "div", "li", "br", "tr", "section", "article", "pre", "table"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "style"):
            self.skip += 1
        elif re.fullmatch(r"h[1-6]", tag):
            self.out.append("\n\n" + "#" * int(tag[1]) + " ")
        elif tag in self.BLOCK:
            self.out.append("\n\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style") and self.skip:
            self.skip -= 1
        elif re.fullmatch(r"h[1-6]", tag):
            self.out.append("\n\n")

    def handle_data(self, data: str) -> None:
        if not self.skip:
            self.out.append(data)


def html_text(html: str) -> str:
    """An HTML page's text, with its headings as Markdown headings."""
    parser = _Html()
    parser.feed(html)
    parser.close()
    lines = [" ".join(line.split()) for line in "".join(parser.out).split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def _sections(text: str) -> list[tuple[str, str]]:
    """(heading path, body) of each section under a Markdown heading (``""`` before the
    first)."""
    path: list[tuple[int, str]] = []
    sections: list[tuple[str, list[str]]] = [("", [])]
    fence = ""  # inside a fenced code block: its fence (a "# ..." there is a comment)
    for line in text.splitlines():
        stripped = line.lstrip()
        if fence and stripped.startswith(fence):
            fence = ""
        elif not fence and stripped.startswith(("```", "~~~")):
            fence = stripped[:3]
        found = None if fence or stripped.startswith(("```", "~~~")) else _MD_HEADING.match(line)
        if found:
            level, title = len(found.group(1)), found.group(2).strip()
            path = [p for p in path if p[0] < level] + [(level, title)]
            sections.append((" > ".join(t for _, t in path), []))
        else:
            sections[-1][1].append(line)
    return [(heading, "\n".join(body).strip()) for heading, body in sections]


def _windows(words: list[str], size: int, overlap: int) -> list[list[str]]:
    if len(words) <= size:
        return [words]
    step = max(1, size - overlap)
    out = []
    for start in range(0, len(words), step):
        out.append(words[start : start + size])
        if start + size >= len(words):
            break
    return out


def chunk_text(
    text: str, *, size: int = DEFAULT_SIZE, overlap: int = DEFAULT_OVERLAP
) -> list[Chunk]:
    """``text`` (plain or Markdown) in chunks of at most ``size`` words.

    Paragraphs of one section are packed together while they fit; a paragraph longer than
    ``size`` is cut into overlapping windows.

    Raises:
        ValueError: ``size`` is not positive, or ``overlap`` is not below it.
    """
    if size <= 0 or not 0 <= overlap < size:
        raise ValueError(f"chunk size {size} and overlap {overlap}: need 0 <= overlap < size")
    chunks: list[Chunk] = []

    def emit(heading: str, words: list[str]) -> None:
        if words:
            chunks.append(Chunk(len(chunks), heading, " ".join(words)))

    for heading, body in _sections(text):
        packed: list[str] = []
        for paragraph in re.split(r"\n\s*\n", body):
            words = _WORD.findall(paragraph)
            if not words:
                continue
            if len(packed) + len(words) <= size:
                packed += words
                continue
            emit(heading, packed)
            packed = []
            windows = _windows(words, size, overlap)
            for window in windows[:-1]:
                emit(heading, window)
            packed = list(windows[-1])
        emit(heading, packed)
    return chunks
