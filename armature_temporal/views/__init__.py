"""What ``armature report`` and ``armature dashboard`` show, computed from the trace store.

Three layers: ``load_*`` read :class:`RunTrace` objects from a TraceStore; ``build_*`` are pure
functions from those to report and dashboard models (what ``--json`` prints); ``render_*`` turn
the models into rich renderables. Aggregates are kept per spec version (spec_hash) and never
mix versions.

- :mod:`~armature_temporal.views.report`: one run (``armature report RUN``): :class:`RunTrace`,
  the report models, :func:`build_report` and :func:`load_run`.
- :mod:`~armature_temporal.views.dashboard`: a spec over many runs (``armature dashboard``):
  the per-version models, :func:`build_dashboard`, :func:`build_overview` and
  :func:`load_runs`.
- :mod:`~armature_temporal.views.cache`: the dashboard's answer-cache section (hits exact and
  semantic, saved cost, recent hits) and its panel (rich imported inside it).
- :mod:`~armature_temporal.views.render`: the rich renderables of both (``render_*``), the
  only module here that uses rich at import (imported when something is rendered).

``render`` imports ``report``, ``dashboard`` and ``cache``; ``dashboard`` imports ``report``
and ``cache``; ``cache`` imports ``report``; never the reverse.
"""

from armature_temporal.views.dashboard import (
    SPARK_WIDTH,
    ConfigUsage,
    HQSTrend,
    SpecDashboard,
    SpecSummary,
    VersionStats,
    build_dashboard,
    build_overview,
    failure_counts,
    load_runs,
    percentile,
    sparkline,
)
from armature_temporal.views.render import render_dashboard, render_overview, render_report
from armature_temporal.views.report import (
    AttemptView,
    GateView,
    RunReport,
    RunTrace,
    StageView,
    ToolCallView,
    build_report,
    load_run,
)

__all__ = [
    "SPARK_WIDTH",
    "AttemptView",
    "ConfigUsage",
    "GateView",
    "HQSTrend",
    "RunReport",
    "RunTrace",
    "SpecDashboard",
    "SpecSummary",
    "StageView",
    "ToolCallView",
    "VersionStats",
    "build_dashboard",
    "build_overview",
    "build_report",
    "failure_counts",
    "load_run",
    "load_runs",
    "percentile",
    "render_dashboard",
    "render_overview",
    "render_report",
    "sparkline",
]
