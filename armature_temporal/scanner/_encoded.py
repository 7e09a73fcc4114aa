"""Text hidden in base64 or hex: found, decoded within bounds, and handed back to be scanned.

Every pattern is blind to ``SWdub3JlIGFsbCBwcmV2aW91cyBpbnN0cnVjdGlvbnM=`` ("Ignore all previous
instructions") and to a key written out in hex, and a model reads both. So :func:`encoded_runs`
finds runs that look like base64 (standard or URL-safe alphabet) or hex, decodes them, and keeps
the ones whose decoding is text; :func:`~._scan.scan` scans that text too, and a finding in it
spans the encoded run and names the encoding (``base64``, ``hex``; ``base64>hex`` for hex
inside base64).

Bounded, so that a text cannot make the scanner slow or large:

- only runs of :data:`MIN_BASE64` / :data:`MIN_HEX` characters and more, of which at most the
  first :data:`MAX_RUN` are decoded;
- the decoding must be UTF-8 that is at least :data:`MIN_PRINTABLE` printable and a quarter
  letters or digits: binary (an image in a data URI), a hash digest, a UUID (its dashes cut it
  into short runs) or a compressed blob decode to no text and are left alone;
- decoded text is searched again, :data:`MAX_DEPTH` levels in all;
- per scan at most :data:`MAX_ATTEMPT` characters are decoded and :data:`MAX_DECODED` kept, in
  text order.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass

__all__ = [
    "MAX_ATTEMPT",
    "MAX_DECODED",
    "MAX_DEPTH",
    "MAX_RUN",
    "MIN_BASE64",
    "MIN_HEX",
    "MIN_PRINTABLE",
    "Budget",
    "EncodedRun",
    "encoded_runs",
]

#: Shortest base64 run decoded: 24 characters are 18 bytes, a short sentence or a key.
MIN_BASE64 = 24
#: Shortest hex run decoded: 32 hex digits are 16 bytes.
MIN_HEX = 32
#: Characters of one run decoded, at most (the rest of a longer run is not).
MAX_RUN = 16 * 1024
#: Levels of decoding: 2 finds hex inside base64, not a third layer.
MAX_DEPTH = 2
#: Characters decoded per scan, whatever comes of them.
MAX_ATTEMPT = 256 * 1024
#: Characters of decoded text kept (and scanned) per scan.
MAX_DECODED = 64 * 1024
#: Share of printable characters (tab and line breaks count) a decoding needs to be text.
MIN_PRINTABLE = 0.9

_BASE64_RUN = re.compile(
    r"(?<![A-Za-z0-9+/_=-])[A-Za-z0-9+/_-]{" + str(MIN_BASE64) + r",}={0,2}(?![A-Za-z0-9+/=_-])"
)
_HEX = re.compile(r"(?:0x)?([0-9A-Fa-f]+)")


@dataclass
class Budget:
    """What is left of one scan's decoding allowance (shared by every level)."""

    attempt: int = MAX_ATTEMPT
    decoded: int = MAX_DECODED


@dataclass(frozen=True)
class EncodedRun:
    """A run of ``text[start:end]`` that decodes, as ``encoding``, to ``decoded``."""

    start: int
    end: int
    encoding: str
    decoded: str


def encoded_runs(text: str, budget: Budget) -> list[EncodedRun]:
    """The base64 and hex runs of ``text`` that decode to text, within ``budget``."""
    out: list[EncodedRun] = []
    for m in _BASE64_RUN.finditer(text):
        if budget.attempt <= 0 or budget.decoded <= 0:
            break
        run = m.group()
        hex_digits = _HEX.fullmatch(run)
        if hex_digits:  # all hex digits: hex, never base64 (a digest, a key, bytes)
            if len(hex_digits.group(1)) < MIN_HEX:
                continue
            encoding, decoded = "hex", _decode_hex(hex_digits.group(1)[:MAX_RUN], budget)
        else:
            encoding, decoded = "base64", _decode_base64(run[:MAX_RUN], budget)
        if decoded is None:
            continue
        decoded = decoded[: budget.decoded]
        budget.decoded -= len(decoded)
        out.append(EncodedRun(m.start(), m.end(), encoding, decoded))
    return out


def _decode_base64(run: str, budget: Budget) -> str | None:
    body = run.rstrip("=")
    urlsafe = "-" in body or "_" in body
    if (urlsafe and ("+" in body or "/" in body)) or len(body) % 4 == 1:
        return None  # two alphabets mixed, or a length no base64 has
    budget.attempt -= len(body)
    try:
        raw = base64.b64decode(
            body + "=" * (-len(body) % 4), altchars=b"-_" if urlsafe else None, validate=True
        )
    except (binascii.Error, ValueError):
        return None
    return _as_text(raw)


def _decode_hex(run: str, budget: Budget) -> str | None:
    body = run[: len(run) - len(run) % 2]
    budget.attempt -= len(body)
    try:
        raw = bytes.fromhex(body)
    except ValueError:
        return None
    return _as_text(raw)


def _as_text(raw: bytes) -> str | None:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if not text:
        return None
    printable = sum(1 for c in text if c.isprintable() or c in "\t\n\r")
    if printable < MIN_PRINTABLE * len(text) or sum(c.isalnum() for c in text) * 4 < len(text):
        return None
    return text
