"""The trace store: runs, hash-chained trace records and gate decisions on SQLite or PostgreSQL.

:class:`TraceStore` (``trace_store``) writes and reads runs; it also keeps the improvement
proposals (``proposals``), fine-tune adapters (``adapters``), cross-run memory (``memory``)
and the experience memory's heuristics (``heuristics``), and ``tamper`` checks a run's stored
chain. This package does I/O; it never imports temporalio.
"""

from armature_temporal.store.adapters import AdapterError
from armature_temporal.store.engine import StoreError, database_url
from armature_temporal.store.migrations import MIGRATIONS, migrate
from armature_temporal.store.proposals import ProposalError
from armature_temporal.store.trace_store import TraceStore

__all__ = [
    "MIGRATIONS",
    "AdapterError",
    "ProposalError",
    "StoreError",
    "TraceStore",
    "database_url",
    "migrate",
]
