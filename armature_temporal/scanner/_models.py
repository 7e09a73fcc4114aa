"""The scanner's result types: a :class:`ScanResult` holds typed :class:`Finding` objects."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["CATEGORIES", "Category", "Finding", "ScanResult"]

Category = Literal[
    "prompt_injection",
    "score_manipulation",
    "tool_misuse",
    "secret",
    "personal_data",
    "scope_overreach",
]
"""What a finding is about. The caller decides what to do with each (quarantine, redact, block)."""

CATEGORIES: tuple[Category, ...] = (
    "prompt_injection",
    "score_manipulation",
    "tool_misuse",
    "secret",
    "personal_data",
    "scope_overreach",
)

MASKED_CATEGORIES: frozenset[Category] = frozenset({"secret", "personal_data"})
"""Categories whose :attr:`Finding.text` is masked, so a logged result never repeats the value."""


class Finding(BaseModel):
    """One thing the scanner found in a text.

    Attributes:
        category: What kind of risk this is.
        span: ``[start, end)`` character offsets into the scanned text (Python ``str``
            indices, so ``text[start:end]`` is the matched substring).
        text: The matched substring, except for ``secret`` and ``personal_data`` findings,
            where it is masked (``sk-p…[164 chars]``): results get logged and stored, and
            must not spread the value they warn about. Use ``span`` on the original text to
            get the value itself.
        score: Confidence in ``[0, 1]``. Every reported finding scores at least 0.5, the
            operating point each detector was tuned to; higher is more certain.
        rule: Which detector or rule matched (``openai-api-key``, ``injection-model``, …),
            so a finding can be explained and a noisy rule switched off by the caller.
        encoding: None for text found as written. ``base64`` or ``hex`` (``base64>hex``:
            hex inside base64, outermost first) when it was found by decoding a run of the
            text: ``span`` is then the encoded run and ``text`` comes from the decoding.
    """

    model_config = ConfigDict(frozen=True)

    category: Category
    span: tuple[int, int]
    text: str
    score: float = Field(ge=0.0, le=1.0)
    rule: str
    encoding: str | None = None

    @model_validator(mode="after")
    def _span_is_ordered(self) -> Finding:
        start, end = self.span
        if not 0 <= start <= end:
            raise ValueError(f"span must satisfy 0 <= start <= end, got {list(self.span)!r}")
        return self


class ScanResult(BaseModel):
    """What :func:`~armature_temporal.scanner.scan` found in one text.

    Attributes:
        flagged: True when there is at least one finding.
        findings: The findings, ordered by span start, then category.
    """

    model_config = ConfigDict(frozen=True)

    flagged: bool
    findings: list[Finding]

    def categories(self) -> set[Category]:
        """The set of categories found."""
        return {f.category for f in self.findings}


def mask(value: str) -> str:
    """Mask a sensitive value for display: its first 4 characters and its length.

    Values of 8 characters or fewer keep nothing but their length.
    """
    if len(value) <= 8:
        return f"…[{len(value)} chars]"
    return f"{value[:4]}…[{len(value)} chars]"
