"""Views of Armature's record for the tools teams already run.

The trace store is the record; these are views of it: OpenTelemetry spans that follow the
GenAI semantic conventions under Temporal's own interceptor spans (:mod:`.tracing`), and
Prometheus metrics with low-cardinality labels (:mod:`.metrics`). Both are off until asked
for, and neither can slow or fail a run: exports happen on background threads with bounded
queues, and what could not be sent is counted and logged, never retried in the run's path.
"""
