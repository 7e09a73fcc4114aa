"""The ``armature`` command's commands, one module per room; ``cli.py`` assembles them.

Each room module holds a ``typer.Typer`` named ``app`` with its commands (and its command
groups, such as ``runs`` or ``proposals``); ``cli.py`` adds every room's ``app`` to the
``armature`` app. Each command names its room's heading in ``armature --help`` with
``rich_help_panel``.

- :mod:`~armature_temporal.commands.authoring` (Write specs): ``validate``, ``plan``,
  ``schema``, ``new``, ``scan``. No Temporal needed.
- :mod:`~armature_temporal.commands.runs` (Run and approve): ``submit``, ``run``,
  ``schedule``, ``cancel``, ``runs list|show``; ``runs watch`` is in
  :mod:`~armature_temporal.commands.runs_watch` (``cli.py`` mounts it on the group), and how
  a run is followed and printed in :mod:`~armature_temporal.commands.run_view`.
- :mod:`~armature_temporal.commands.evals` (Run and approve): ``eval`` (a cases file run on a
  spec and graded; ``--compare`` for two specs).
- :mod:`~armature_temporal.commands.approvals` (Run and approve): ``approve``, ``reject``,
  ``gates``.
- :mod:`~armature_temporal.commands.loops` (Learn and improve): ``improve``, ``finetune``.
- :mod:`~armature_temporal.commands.learn` (Learn and improve): ``learn`` (the experience loop).
- :mod:`~armature_temporal.commands.knowledge` (Learn and improve): ``knowledge
  add|list|search|remove|rebuild`` (documents indexed for retrieval).
- :mod:`~armature_temporal.commands.review` (Learn and improve): ``proposals *``,
  ``adapters *``.
- :mod:`~armature_temporal.commands.memory` (Learn and improve): ``memory *`` (the
  experience memory's heuristics).
- :mod:`~armature_temporal.commands.bandits` (Learn and improve): ``bandit *``, ``reward``.
- :mod:`~armature_temporal.commands.cache` (Inspect the record): ``cache stats|clear`` and
  ``cache eval`` (from ``cache_eval``, which ``cli.py`` mounts on the group).
- :mod:`~armature_temporal.commands.reports` (Inspect the record): ``report``,
  ``dashboard``, ``traces verify``, ``export-traces``. The trace store only.
- :mod:`~armature_temporal.commands.stack` (Run the stack): ``worker``, ``dev``,
  ``dev stop``.
- :mod:`~armature_temporal.commands.serve` (Run the stack): ``serve`` (the run API and
  webhooks); :mod:`~armature_temporal.commands.watch` (Run the stack): ``watch``. What the
  two share (the edge options, the webhook secret's rules) is in ``_serving``, which only
  they import.
- :mod:`~armature_temporal.commands.tokens` (Run the stack): ``tokens create|list|revoke``
  (the run API's tokens).
- :mod:`~armature_temporal.commands.mcp` (Run the stack): ``mcp serve`` (specs as MCP tools,
  over stdio or HTTP behind the run API's tokens, whose store it opens through ``_serving``).
- :mod:`~armature_temporal.commands.doctor` (Run the stack): ``doctor``.
- :mod:`~armature_temporal.commands._common`: what several rooms share (the consoles, the
  ``--json``/``--address``/``--task-queue`` options, the ``SPEC`` argument, printing JSON,
  failing with an exit code, running coroutines, the Temporal client, loading a spec, opening
  the trace store), one place for each.

Rooms import only ``_common`` (and ``serve``/``watch``/``mcp`` also ``_serving``) from this package,
never each other. Heavy modules (the Temporal
client, the store, litellm, torch) are imported inside the commands that need them, so that
``armature --help`` stays fast.
"""

from armature_temporal.commands import (
    approvals,
    authoring,
    bandits,
    cache,
    doctor,
    evals,
    knowledge,
    learn,
    loops,
    mcp,
    memory,
    reports,
    review,
    runs,
    serve,
    stack,
    tokens,
    watch,
)

__all__ = [
    "approvals",
    "authoring",
    "bandits",
    "cache",
    "doctor",
    "evals",
    "knowledge",
    "learn",
    "loops",
    "mcp",
    "memory",
    "reports",
    "review",
    "runs",
    "serve",
    "stack",
    "tokens",
    "watch",
]
