"""The run API under ``armature serve`` (FastAPI; the ``serve`` extra).

- ``principal`` — who is asking (:class:`Principal`) and the scopes a token may hold; the
  :class:`Authorizer` protocol the routes check requests against.
- ``errors`` — :class:`ApiError` and the JSON error body every route answers with:
  ``{"error": {"code", "message", "fix"}}``.
- ``deps`` — what a route depends on: :class:`ServiceState` (on ``app.state.armature``),
  ``require(scope)`` and ``temporal`` (a connected client, or 503).
- ``auth`` — :class:`TokenAuthorizer`, the Authorizer over the store's API tokens (open only
  on loopback while no token exists).
- ``runs`` — the routes: health, specs, starting / showing / cancelling runs, gates.
- ``events`` — ``GET /run/{id}/events`` (server-sent events); ``streams`` — their caps per
  token and overall, and ending a revoked token's streams.
- ``scope`` — which runs this server acts on (those of the specs it serves, unless
  ``--all-runs``): another spec's run is answered as a run that does not exist.
- ``ui`` and ``ui_session`` — the approval inbox at ``/ui`` and its sessions.
- ``app`` — ``create_service_app``: the routes, OpenAPI and docs behind ``read``, body limits,
  the webhooks mounted last.
- ``edge`` — what ``armature serve`` checks before it listens (token rule, reserved paths).

Nothing here imports FastAPI at package import; the modules that define routes do.
"""
