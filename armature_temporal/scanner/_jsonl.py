"""``scan_jsonl``: the line protocol behind ``armature scan``.

Input: one JSON string per line (``"text to scan"``). Output: one JSON object per input
line, in order, so line *n* of the output answers line *n* of the input:

- ``{"flagged": bool, "findings": [{"category", "span", "text", "score", "rule",
  "encoding"}, ...]}`` for a string (``encoding`` is null, or ``base64`` / ``hex`` for text
  found by decoding a run);
- ``{"line": n, "error": "..."}`` for a line that is not a JSON string (blank lines
  included), naming the 1-based line number. Scanning goes on with the next line.
"""

from __future__ import annotations

import json
from typing import TextIO

from armature_temporal.scanner._linear import LinearModel
from armature_temporal.scanner._scan import scan

__all__ = ["scan_jsonl"]


def scan_jsonl(in_stream: TextIO, out_stream: TextIO, *, model: LinearModel | None = None) -> int:
    """Scan each JSON-string line of ``in_stream``; write one JSON object per line.

    Returns:
        The exit code: 0 when every line was a JSON string (flagged or not), 1 when at
        least one line was not (its output line is an error object).
    """
    status = 0
    for lineno, line in enumerate(in_stream, start=1):
        raw = line.rstrip("\r\n")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            what = (
                "an empty line"
                if not raw.strip()
                else f"invalid JSON ({exc.msg} at column {exc.colno})"
            )
            _write(
                out_stream,
                {"line": lineno, "error": f"line {lineno}: expected a JSON string, got {what}"},
            )
            status = 1
            continue
        if not isinstance(value, str):
            _write(
                out_stream,
                {
                    "line": lineno,
                    "error": f"line {lineno}: expected a JSON string, got a JSON "
                    f"{_json_type(value)}; quote the text, e.g. {json.dumps(str(value))[:40]}",
                },
            )
            status = 1
            continue
        _write(out_stream, scan(value, model=model).model_dump(mode="json"))
    out_stream.flush()
    return status


def _write(out: TextIO, obj: object) -> None:
    out.write(json.dumps(obj, ensure_ascii=False))
    out.write("\n")


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, list):
        return "array"
    return "object"
