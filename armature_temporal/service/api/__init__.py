"""The run API under ``armature serve`` (FastAPI; the ``serve`` extra).

- ``principal`` — who is asking (:class:`Principal`) and the scopes a token may hold; the
  :class:`Authorizer` protocol the routes check requests against.
- ``errors`` — :class:`ApiError` and the JSON error body every route answers with:
  ``{"error": {"code", "message", "fix"}}``.
- ``deps`` — what a route depends on: :class:`ServiceState` (on ``app.state.armature``),
  ``require(scope)`` and ``temporal`` (a connected client, or 503).

Nothing here imports FastAPI at package import; the modules that define routes do.
"""
