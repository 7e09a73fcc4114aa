"""Training data from the trace store: SFT rows and DPO preference pairs, as JSON Lines.

Both formats are built from ``attempt`` records, whose ``data["messages"]`` holds the chat
messages the model was sent (role contract, mission and output contract in the system message,
the rendered stage prompt in the user message, and any tool-loop turns). Attempts recorded
without them cannot become training rows; they are skipped and counted.

SFT, one row per valid attempt of a stage that completed (duplicates dropped)::

    {"messages": [{"role": "system", ...}, {"role": "user", ...}], "output": "<reply>"}

DPO, pairs of attempts sent the same messages (same ``inputs_hash``) where one is better::

    {"prompt": [{"role": "system", ...}, ...], "chosen": "<reply>", "rejected": "<reply>"}

"Better": a valid output beats an invalid one; between two valid outputs of a stage that a
downstream judge scored, the higher judge score wins (equal scores make no pair). Each group
of attempts yields its best attempt as ``chosen`` against every attempt it beats.

A reply is the assistant text to train on: the text itself for text stages, compact JSON for
JSON stages; for an invalid attempt, the raw completion when the record keeps one in
``data["text"]``, else the parsed value (an unparseable reply with no raw text is skipped).
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TextIO

from pydantic import BaseModel

from armature_temporal.runtime.traces import TraceRecord
from armature_temporal.views import RunTrace

__all__ = [
    "JSON_CONTRACT_MARKER",
    "ExportFormat",
    "ExportStats",
    "dpo_rows",
    "dump_jsonl",
    "judged_scores",
    "messages_of",
    "reply_text",
    "run_score",
    "sft_rows",
    "write_jsonl",
]

ExportFormat = Literal["sft", "dpo"]

#: The start of the output contract that prompts.build_messages adds to the system message of
#: JSON stages; it tells a JSON reply from a text reply shaped like ``{"content": ...}``.
JSON_CONTRACT_MARKER = "Reply with a single JSON value"


class ExportStats(BaseModel):
    """What an export read, wrote and skipped (printed on stderr, or as ``--json``)."""

    format: ExportFormat
    spec: str
    stage: str | None = None
    min_score: float | None = None
    runs: int = 0
    attempts: int = 0
    rows: int = 0
    no_messages: int = 0
    not_successful: int = 0
    below_min_score: int = 0
    no_reply: int = 0
    duplicates: int = 0
    groups: int = 0
    undistinguished: int = 0

    def summary(self, path: Path | None = None) -> str:
        """One line for stderr: what was written and why the rest was skipped."""
        what = "SFT rows" if self.format == "sft" else "DPO pairs"
        where = f" to {path}" if path is not None else ""
        stage = f", stage {self.stage!r}" if self.stage else ""
        line = (
            f"wrote {self.rows} {what}{where} from {self.attempts} attempt(s) in {self.runs} "
            f"run(s) of spec {self.spec!r}{stage}"
        )
        skipped = [
            (self.no_messages, "without stored messages (recorded before prompts were kept)"),
            (self.not_successful, "not from a successful stage"),
            (self.below_min_score, f"from runs scoring below --min-score {self.min_score}"),
            (self.no_reply, "with no usable reply text"),
            (self.duplicates, "duplicate"),
        ]
        if self.format == "dpo":
            line += f"; {self.groups} prompt(s) were sent more than once"
            skipped.append((self.undistinguished, "group(s) where no attempt was better"))
        parts = [f"{count} {why}" for count, why in skipped if count]
        return line + ("; skipped: " + ", ".join(parts) if parts else "")


def messages_of(record: TraceRecord) -> list[dict[str, Any]] | None:
    """The chat messages an attempt was sent, or None when the record does not keep them."""
    messages = record.data.get("messages")
    if isinstance(messages, list) and messages and all(isinstance(m, dict) for m in messages):
        return messages
    return None


def _asked_for_json(messages: Sequence[dict[str, Any]]) -> bool:
    return any(
        m.get("role") == "system" and JSON_CONTRACT_MARKER in str(m.get("content", ""))
        for m in messages
    )


def reply_text(record: TraceRecord) -> str | None:
    """The assistant text of an attempt, or None when nothing usable was kept."""
    raw = record.data.get("text")
    if record.output_valid is False and isinstance(raw, str) and raw.strip():
        return raw
    output = record.output
    if output is None:
        return None
    if (
        isinstance(output, dict)
        and isinstance(output.get("content"), str)
        and not _asked_for_json(messages_of(record) or [])
    ):
        return output["content"] or None
    return json.dumps(output, ensure_ascii=False)


def judged_scores(run: RunTrace) -> dict[str, float]:
    """Stage id → the judge score given to it in this run (the mean when several judges).

    A judge stage judges the stages whose outputs it could read: its attempts' provenance
    lists them as ``stage:<id>``.
    """
    scored: dict[str, float] = {}
    reads: dict[str, set[str]] = defaultdict(set)
    for r in run.records:
        if r.kind == "stage" and r.role_type == "judge" and r.judge_score is not None:
            scored[r.stage_id or ""] = r.judge_score
        elif r.kind == "attempt" and r.role_type == "judge":
            reads[r.stage_id or ""].update(
                v.removeprefix("stage:")
                for v in r.inputs_provenance.values()
                if v.startswith("stage:")
            )
    given: dict[str, list[float]] = defaultdict(list)
    for judge, score in scored.items():
        for stage in reads[judge]:
            given[stage].append(score)
    return {stage: sum(s) / len(s) for stage, s in given.items()}


def run_score(run: RunTrace) -> float | None:
    """The run's mean judge score, or its HQS when it has no judge scores (None if neither)."""
    scores = [
        r.judge_score
        for r in run.records
        if r.kind == "stage" and r.role_type == "judge" and r.judge_score is not None
    ]
    return sum(scores) / len(scores) if scores else run.hqs


def _attempts(
    runs: Iterable[RunTrace], stage: str | None
) -> Iterable[tuple[RunTrace, TraceRecord]]:
    for run in runs:
        for r in run.records:
            if r.kind == "attempt" and (stage is None or r.stage_id == stage):
                yield run, r


def _prompt_key(record: TraceRecord, messages: list[dict[str, Any]]) -> str:
    if record.inputs_hash:
        return record.inputs_hash
    body = json.dumps(messages, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


def sft_rows(
    runs: Sequence[RunTrace],
    *,
    spec: str,
    stage: str | None = None,
    min_score: float | None = None,
    with_run_id: bool = False,
) -> tuple[list[dict[str, Any]], ExportStats]:
    """SFT rows from the valid attempts of completed stages (see the module docstring);
    ``with_run_id`` adds each row's ``run_id`` (the first run that gave it)."""
    stats = ExportStats(format="sft", spec=spec, stage=stage, min_score=min_score, runs=len(runs))
    rows: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    completed = {
        (run.run_id, r.stage_id)
        for run in runs
        for r in run.records
        if r.kind == "stage" and r.status == "completed"
    }
    scores = {run.run_id: run_score(run) for run in runs}
    for run, r in _attempts(runs, stage):
        stats.attempts += 1
        messages = messages_of(r)
        if messages is None:
            stats.no_messages += 1
            continue
        if not r.output_valid or (run.run_id, r.stage_id) not in completed:
            stats.not_successful += 1
            continue
        score = scores[run.run_id]
        if min_score is not None and (score is None or score < min_score):
            stats.below_min_score += 1
            continue
        reply = reply_text(r)
        if reply is None:
            stats.no_reply += 1
            continue
        key = (_prompt_key(r, messages), reply)
        if key in seen:
            stats.duplicates += 1
            continue
        seen.add(key)
        row: dict[str, Any] = {"messages": messages, "output": reply}
        if with_run_id:
            row["run_id"] = run.run_id
        rows.append(row)
    stats.rows = len(rows)
    return rows, stats


@dataclass(frozen=True)
class _Candidate:
    record: TraceRecord
    messages: list[dict[str, Any]]
    valid: bool
    score: float | None
    run_id: str = ""

    def beats(self, other: _Candidate) -> bool:
        if self.valid != other.valid:
            return self.valid
        return (
            self.valid
            and self.score is not None
            and other.score is not None
            and self.score > other.score
        )


def dpo_rows(
    runs: Sequence[RunTrace], *, spec: str, stage: str | None = None, with_run_id: bool = False
) -> tuple[list[dict[str, Any]], ExportStats]:
    """DPO pairs from attempts sent the same messages (see the module docstring);
    ``with_run_id`` adds each pair's ``run_id`` (the run of the chosen reply) and
    ``rejected_run_id`` (the run of the rejected one; the same run when a retry succeeded)."""
    stats = ExportStats(format="dpo", spec=spec, stage=stage, runs=len(runs))
    groups: dict[tuple[str, str], list[_Candidate]] = defaultdict(list)
    for run in runs:
        judged = judged_scores(run)
        finals = {
            r.stage_id: r.output
            for r in run.records
            if r.kind == "stage" and r.status == "completed"
        }
        for _, r in _attempts([run], stage):
            stats.attempts += 1
            messages = messages_of(r)
            if messages is None:
                stats.no_messages += 1
                continue
            sid = r.stage_id or ""
            # The judge saw the stage's final output: only the attempt that produced it is scored.
            scored = bool(r.output_valid) and sid in judged and finals.get(sid) == r.output
            groups[(sid, _prompt_key(r, messages))].append(
                _Candidate(
                    record=r,
                    messages=messages,
                    valid=bool(r.output_valid),
                    score=judged[sid] if scored else None,
                    run_id=run.run_id,
                )
            )
    rows: list[dict[str, Any]] = []
    for members in groups.values():
        if len(members) < 2:
            continue
        stats.groups += 1
        best = max(
            members,
            key=lambda c: (c.valid, c.score is not None, c.score if c.score is not None else 0.0),
        )
        worse = [c for c in members if best.beats(c)]
        if not worse:
            stats.undistinguished += 1
            continue
        chosen = reply_text(best.record)
        if chosen is None:
            stats.no_reply += len(worse)
            continue
        used = {chosen}
        for c in worse:
            rejected = reply_text(c.record)
            if rejected is None:
                stats.no_reply += 1
            elif rejected in used:
                stats.duplicates += 1
            else:
                used.add(rejected)
                row: dict[str, Any] = {
                    "prompt": best.messages,
                    "chosen": chosen,
                    "rejected": rejected,
                }
                if with_run_id:
                    row["run_id"] = best.run_id
                    row["rejected_run_id"] = c.run_id
                rows.append(row)
    stats.rows = len(rows)
    return rows, stats


def dump_jsonl(rows: Iterable[dict[str, Any]], fh: TextIO) -> None:
    """One JSON object per line to the open text stream ``fh``."""
    for row in rows:
        fh.write(json.dumps(row, ensure_ascii=False) + "\n")


def write_jsonl(rows: Iterable[dict[str, Any]], path: Path) -> None:
    """One JSON object per line (UTF-8) to ``path``.

    A regular file (or a new one) is written to ``path.tmp`` and then moved over ``path``, so
    readers never see half a file. Anything else that exists there (``/dev/stdout``, a pipe, a
    device) is written in place: moving a file over it would replace it.

    Raises:
        OSError: when ``path`` cannot be written; the error names ``path``, never the
            temporary file.
    """
    try:
        if path.exists() and not path.is_file():
            with path.open("w", encoding="utf-8") as fh:
                dump_jsonl(rows, fh)
            return
        tmp = path.with_name(path.name + ".tmp")
        try:
            with tmp.open("w", encoding="utf-8") as fh:
                dump_jsonl(rows, fh)
            tmp.replace(path)
        except OSError:
            tmp.unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from None
