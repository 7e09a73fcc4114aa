"""The service side: talking to Temporal and serving runs.

``client`` (start, list, show, cancel runs; decide gates), ``devstack`` (the embedded Temporal
dev server and worker), ``schedules`` (cron triggers and the recurring loops as Temporal
Schedules), ``webhooks`` (``armature serve``) and ``temporal_bin`` (the dev server binary).
Names are loaded on first use, so importing the package does not import the Temporal client.
"""

from typing import Any

__all__ = [
    "apply_triggers",
    "connect",
    "decide_gate",
    "ensure_local_stack",
    "list_runs",
    "show_run",
    "start_run",
]

_WHERE = {
    "apply_triggers": "schedules",
    "connect": "client",
    "decide_gate": "client",
    "ensure_local_stack": "devstack",
    "list_runs": "client",
    "show_run": "client",
    "start_run": "client",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        from importlib import import_module

        return getattr(import_module(f"armature_temporal.service.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'armature_temporal.service' has no attribute {name!r}")
