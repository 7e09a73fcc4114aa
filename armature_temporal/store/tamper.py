"""Tamper evidence: a run's stored chain against its summary, its MACs, the ledger and Temporal.

Five checks per run, each reported by name (``armature traces verify``):

- ``chain``: the hash chain (:func:`~armature_temporal.runtime.traces.verify_chain`), and the
  run's last record against the chain head its summary recorded;
- ``mac``: every record's HMAC (the trace key); a chain rewritten with every later hash
  recomputed fails here;
- ``summary_mac``: the HMAC over the run's summary (status, HQS, cost, tokens, chain head, record
  count, ...); a summary edited, or a chain head moved after the tail was deleted, fails here;
- ``ledger``: the run's start and end in the store-wide ledger (:mod:`~.ledger`); a run deleted
  whole is still in the ledger;
- ``temporal_anchor``: the chain head, record count and store id the run's workflow wrote to its
  Temporal memo after each flush, or (its workflow gone) the ledger's anchored record of its
  end (:mod:`~.anchor_checks`): an independent copy the database's writer cannot reach, even
  with the trace key.

And one for the store: ``ledger_anchor``, the ledger against the heads Temporal received.

Runs recorded before keying have no MACs and no ledger entries: they are ``legacy`` (chain
checked, nothing else to check), never ``intact``; a run whose Temporal copy could not be read
is ``unanchored``, never ``intact``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from armature_temporal.runtime.traces import ChainBreak, TraceRecord, verify_chain
from armature_temporal.store._audit import (
    CHECKS,
    Anchor,
    Audit,
    CheckName,
    Finding,
    LedgerAnchorCheck,
    LedgerAnchorReading,
    RunAudit,
    RunCheck,
)
from armature_temporal.store.anchor_checks import check_ledger_anchor, check_run_anchor
from armature_temporal.store.keys import TraceKey, canonical, key_id_of
from armature_temporal.store.ledger import LedgerEntry, LedgerState, legacy_digest

__all__ = [
    "CHECKS",
    "LEDGER_SUMMARY_FIELDS",
    "SUMMARY_FIELDS",
    "Anchor",
    "Audit",
    "CheckName",
    "Finding",
    "LedgerAnchorCheck",
    "LedgerAnchorReading",
    "RunAudit",
    "audit_store",
    "check_run",
    "run_summary",
]

#: The run summary columns its MAC covers.
SUMMARY_FIELDS = (
    "run_id",
    "spec_name",
    "spec_hash",
    "spec_version",
    "policy_version",
    "parent_run_id",
    "verification",
    "status",
    "reason",
    "inputs",
    "outputs",
    "started_at",
    "finished_at",
    "latency_ms",
    "prompt_tokens",
    "completion_tokens",
    "cost_usd",
    "hqs",
    "chain_head",
    "chain_length",
)
#: What a run's ``run_end`` ledger entry repeats of its summary (so verify can name a field).
LEDGER_SUMMARY_FIELDS = (
    "status",
    "hqs",
    "cost_usd",
    "prompt_tokens",
    "completion_tokens",
    "chain_head",
    "chain_length",
)


def run_summary(row: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a ``runs`` row its summary MAC covers."""
    summary = {f: row.get(f) for f in SUMMARY_FIELDS}
    summary["verification"] = bool(summary["verification"])
    return summary


def check_run(run_id: str, records: Sequence[TraceRecord], head: str | None) -> ChainBreak | None:
    """The first break in one run's stored records (in ``seq`` order), given the chain head
    its summary recorded (``None``: a run recorded before summaries kept a head while running).

    Refines :func:`~armature_temporal.runtime.traces.verify_chain` with what only the store knows:

    - the recorded head is an earlier record: records were appended after it was recorded
      (``inserted``); it is no record at all: records at the end were removed (``deleted``);
    - a record renumbered one place on that follows the same record as the one now before it:
      that one was spliced in (``inserted``), the rest renumbered to make room.
    """
    if not records:
        return ChainBreak(
            run_id=run_id,
            seq=None,
            problem="deleted",
            detail="no trace records for this run: all were removed, its summary remains",
        )
    found = verify_chain(run_id, records)
    if found is not None:
        if found.problem == "reordered" and found.seq:
            moved, before = records[found.seq], records[found.seq - 1]
            if moved.prev_hash == before.prev_hash:
                return ChainBreak(
                    run_id=run_id,
                    seq=before.seq,
                    problem="inserted",
                    detail=f"record {before.seq} ({before.kind}) was inserted: the records "
                    f"from {moved.seq} on are the originals renumbered to make room",
                )
        return found
    if head is None or head == records[-1].hash:
        return None
    end = next((r for r in records if r.hash == head), None)
    if end is not None:
        return ChainBreak(
            run_id=run_id,
            seq=end.seq + 1,
            problem="inserted",
            detail=f"record {end.seq + 1} follows the run's recorded chain head (record "
            f"{end.seq}): records were appended after it was recorded",
        )
    return ChainBreak(
        run_id=run_id,
        seq=records[-1].seq + 1,
        problem="deleted",
        detail="the run's recorded chain head is not among its records: records at the end "
        "were removed",
    )


def _show(value: Any) -> str:
    return "not set" if value is None else repr(value)


def audit_store(
    ids: Sequence[str],
    *,
    stored: Mapping[str, Sequence[tuple[TraceRecord, str | None]]],
    summaries: Mapping[str, Mapping[str, Any]],
    state: LedgerState,
    key: TraceKey | None,
    key_file: Path,
    anchors: Mapping[str, Anchor] | None,
    anchors_skipped: str | None,
    whole_store: bool,
    ledger_anchor: LedgerAnchorReading | None = None,
    now: datetime | None = None,
) -> Audit:
    """Check the runs ``ids`` (their records with MACs, ``stored``, and summaries) against
    the ledger ``state`` and Temporal: the runs' memo ``anchors`` and the ledger's anchor
    (``ledger_anchor``), at ``now`` (default: the clock). ``anchors`` None: Temporal was not
    read, ``anchors_skipped`` says why; every keyed run is then unanchored.
    ``whole_store``: also the ledger as a whole (every run was asked for)."""
    store_findings: list[Finding] = [
        Finding(run_id=None, check="ledger", problem="broken", detail=p) for p in state.problems
    ]
    started, ended = state.started, state.ended
    ledger_begun = bool(state.entries)
    unread = (anchors_skipped or "not asked for") if anchors is None else None
    ledger_check, ledger_findings = check_ledger_anchor(
        state,
        ledger_anchor if anchors is not None else None,
        unread or "the ledger's anchor was not read",
        now or datetime.now(UTC),
    )
    store_findings += ledger_findings
    covered = (
        ledger_check.anchored_seq
        if ledger_check.status in ("ok", "behind", "stale") and not state.problems
        else None
    )
    temporal = _Temporal(unread, state.store_id, covered, ledger_check.detail)
    keyed_somewhere = (
        ledger_begun
        or any(mac is not None for records in stored.values() for _, mac in records)
        or any(s.get("summary_mac") for s in summaries.values())
    )
    if key is None and keyed_somewhere:
        store_findings.append(
            Finding(
                run_id=None,
                check="mac",
                problem="no key",
                detail=f"this store's records carry MACs, but there is no trace key at "
                f"{key_file}: copy the key file of the workers that wrote them there (mode "
                "0600); until then no MAC can be checked",
            )
        )
    listed = set(state.legacy_run_ids) if state.legacy_run_ids is not None else None
    if whole_store and ledger_begun and not state.problems:
        present = set(stored) | set(summaries)
        if listed is not None:
            for gone in sorted(listed - present):
                store_findings.append(
                    Finding(
                        run_id=gone,
                        check="ledger",
                        problem="deleted",
                        detail=f"run {gone} was in the store when the ledger began (legacy), "
                        "and is gone now: its summary and records were deleted",
                    )
                )
        else:
            legacy_now = sorted(present - set(started))
            if legacy_digest(legacy_now) != state.legacy_digest:
                store_findings.append(
                    Finding(
                        run_id=None,
                        check="ledger",
                        problem="changed",
                        detail=f"the runs without ledger entries ({len(legacy_now)}) are not "
                        f"the {state.legacy_runs} the store held when the ledger began: a "
                        "legacy run was deleted, or a run added without the key",
                    )
                )

    audits: list[RunAudit] = []
    for run_id in ids:
        records = list(stored.get(run_id, ()))
        summary = summaries.get(run_id)
        anchor = anchors.get(run_id) if anchors is not None else None
        here = bool(records) or summary is not None or run_id in started
        if (
            not here
            and anchor is not None
            and anchor.store
            and state.store_id
            and anchor.store != state.store_id
        ):
            anchor = None  # a run of another store, not one of this store's deleted runs
        if not here and anchor is None:
            continue  # asked for a run no one knows
        in_ledger = run_id in started
        if in_ledger or anchor is not None:
            legacy = False
        elif not ledger_begun:
            legacy = True
        else:
            legacy = listed is None or run_id in listed
        audits.append(
            _audit_run(
                run_id,
                [r for r, _ in records],
                [m for _, m in records],
                summary,
                legacy=legacy,
                started=started.get(run_id),
                ended=ended.get(run_id),
                key=key,
                key_file=key_file,
                anchor=anchor,
                temporal=temporal,
            )
        )
    ok = not store_findings and all(a.verdict != "broken" for a in audits)
    return Audit(
        checked=len(audits),
        ok=ok,
        runs=audits,
        store=store_findings,
        key_id=key.key_id if key is not None else None,
        temporal_skipped=unread,
        ledger_anchor=ledger_check,
    )


@dataclass(frozen=True)
class _Temporal:
    """What every run's ``temporal_anchor`` check needs to know of Temporal."""

    unread: str | None  # why Temporal was not read (None: it was)
    store_id: str  # this store's id (the ledger's genesis)
    covered: int | None  # the newest ledger entry Temporal holds, when the ledger checks
    ledger_note: str  # the ledger anchor's state, in words


def _audit_run(
    run_id: str,
    records: list[TraceRecord],
    macs: list[str | None],
    summary: Mapping[str, Any] | None,
    *,
    legacy: bool,
    started: LedgerEntry | None,
    ended: LedgerEntry | None,
    key: TraceKey | None,
    key_file: Path,
    anchor: Anchor | None,
    temporal: _Temporal,
) -> RunAudit:
    check = RunCheck(run_id)
    gone = not records and summary is None

    # chain
    if gone:
        check.fail(
            "chain",
            "deleted",
            "neither the run's summary nor any of its records is in the store: the run was "
            "deleted whole",
        )
    else:
        head = summary.get("chain_head") if summary is not None else None
        found = check_run(run_id, records, head)
        if found is not None:
            check.fail("chain", found.problem, found.detail, found.seq)

    # mac (records)
    if gone:
        check.skip("mac", "no records to check")
    elif key is None:
        if legacy and all(m is None for m in macs):
            check.states["mac"] = "legacy"
        else:
            check.skip("mac", f"no trace key at {key_file}")
    else:
        for record, mac in zip(records, macs, strict=True):
            label = f"record {record.seq} ({record.kind})"
            if mac is None:
                if legacy:
                    check.states["mac"] = "legacy"
                    continue
                check.fail(
                    "mac",
                    "stripped",
                    f"{label} has no MAC, but the run was recorded with MACs (it is in the "
                    "ledger or anchored in Temporal): they were removed",
                    record.seq,
                )
                break
            made_with = key_id_of(mac)
            if made_with is not None and made_with != key.key_id:
                check.fail(
                    "mac",
                    "other key",
                    f"{label} was MAC'd with trace key {made_with}, but {key.path} is key "
                    f"{key.key_id}: every writer and verifier needs the same key file (copy the "
                    "one the workers use); if no worker has that key, treat it as forged",
                    record.seq,
                )
                break
            if not key.checks(mac, "record", record.run_id, str(record.seq), record.hash):
                check.fail(
                    "mac",
                    "forged",
                    f"{label}'s MAC does not check against its hash: the record (or the chain "
                    "from it on) was rewritten by someone without the trace key",
                    record.seq,
                )
                break

    # summary_mac
    if summary is None:
        if gone:
            check.skip("summary_mac", "no summary to check")
        elif legacy:
            check.states["summary_mac"] = "legacy"
        else:
            check.fail(
                "summary_mac", "deleted", "the run's summary row was deleted; its records remain"
            )
    elif summary.get("summary_mac") is None:
        if legacy:
            check.states["summary_mac"] = "legacy"
        else:
            check.fail(
                "summary_mac",
                "stripped",
                "the run's summary has no MAC, but the run was recorded with MACs: it was removed",
            )
    elif key is None:
        check.skip("summary_mac", f"no trace key at {key_file}")
    elif key_id_of(summary["summary_mac"]) not in (None, key.key_id):
        check.fail(
            "summary_mac",
            "other key",
            f"the run's summary was MAC'd with trace key {key_id_of(summary['summary_mac'])}, "
            f"but {key.path} is key {key.key_id}: copy the workers' key file here",
        )
    elif not key.checks(summary["summary_mac"], "summary", _canonical_summary(summary)):
        changed = _changed_fields(summary, ended)
        check.fail(
            "summary_mac",
            "edited",
            "the run's summary does not match its MAC: "
            + (
                "; ".join(changed)
                if changed
                else "a field of it (status, HQS, cost, tokens, outputs, chain head, record "
                "count, ...) was changed"
            ),
        )

    # ledger
    if legacy:
        check.states["ledger"] = "legacy"
    elif started is None:
        check.fail(
            "ledger",
            "missing",
            "the run is not in the store's ledger: it was added by someone without the key, "
            "or its ledger entries were removed",
        )
    elif gone:
        check.fail(
            "ledger",
            "deleted",
            f"the ledger recorded this run starting (entry {started.seq}, {started.recorded_at}); "
            "the store has neither its summary nor its records",
        )
    else:
        status = summary.get("status") if summary is not None else None
        if ended is None and status not in (None, "running"):
            check.fail(
                "ledger",
                "missing",
                f"the run's summary says {status!r}, but the ledger has no end for it: its "
                "status was edited, or the ledger's last entries were removed",
            )
        elif ended is not None:
            changed = _changed_fields(summary, ended) if summary is not None else []
            length, head = ended.data.get("chain_length"), ended.data.get("chain_head")
            if changed:
                check.fail("ledger", "mismatch", "; ".join(changed))
            elif len(records) != length or (records and records[-1].hash != head):
                stored_head = records[-1].hash[:12] if records else "none"
                check.fail(
                    "ledger",
                    "mismatch",
                    f"the ledger recorded the run ending with {length} records (head "
                    f"{str(head)[:12]}); the store has {len(records)} (head {stored_head})",
                    records[-1].seq if records else None,
                )

    # temporal_anchor
    if legacy and anchor is None:
        check.states["temporal_anchor"] = "legacy"
    else:
        check_run_anchor(
            check,
            records,
            anchor,
            store_id=temporal.store_id,
            unread=temporal.unread,
            ended=ended,
            covered=temporal.covered,
            ledger_note=temporal.ledger_note,
        )
    return check.done()


def _canonical_summary(summary: Mapping[str, Any]) -> str:
    return canonical(run_summary(summary))


def _changed_fields(summary: Mapping[str, Any], ended: LedgerEntry | None) -> list[str]:
    """``runs.<field> is X, the ledger recorded Y`` for each field the run_end entry repeats."""
    if ended is None:
        return []
    return [
        f"runs.{field} is {_show(summary.get(field))}, "
        f"the ledger recorded {_show(ended.data.get(field))}"
        for field in LEDGER_SUMMARY_FIELDS
        if summary.get(field) != ended.data.get(field)
    ]
