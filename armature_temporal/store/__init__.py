"""The trace store: runs, hash-chained trace records and gate decisions on SQLite or PostgreSQL.

This package does I/O; it never imports temporalio.
"""

from armature_temporal.store.engine import StoreError, database_url
from armature_temporal.store.migrations import MIGRATIONS, migrate
from armature_temporal.store.trace_store import AdapterError, ProposalError, TraceStore

__all__ = [
    "MIGRATIONS",
    "AdapterError",
    "ProposalError",
    "StoreError",
    "TraceStore",
    "database_url",
    "migrate",
]
