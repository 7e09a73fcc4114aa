"""What ``armature serve`` decides before it listens: which webhook paths the run API leaves
free, and whether it may start open (no token), closed, or not at all. Plain functions, so
the CLI only prints what they say."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from armature_temporal.errors import ArmatureError
from armature_temporal.service.api.auth import is_loopback_host

if TYPE_CHECKING:
    from armature_temporal.store.tokens import TokenStore

__all__ = ["ServeRefused", "api_path_clash", "reserved_token_warning", "token_warning"]


class ServeRefused(ArmatureError):
    """``armature serve`` would be unsafe or could not work as configured (exit 2)."""


def api_path_clash(hooks: Mapping[str, Any]) -> None:
    """Refuse a webhook trigger that claims one of the run API's paths.

    Raises:
        ServeRefused: naming the spec, the trigger and the path.
    """
    from armature_temporal.service.api.app import API_PREFIXES, reserved_path

    for hook in hooks.values():
        if reserved_path(hook.path):
            raise ServeRefused(
                f"spec {hook.plan.name!r} triggers[{hook.trigger_index}]: webhook path "
                f"{hook.path!r} is the run API's (it owns {', '.join(API_PREFIXES)}); give the "
                f"trigger another path, e.g. /hooks/{hook.plan.name}"
            )


def token_warning(store: TokenStore, host: str, port: int, allow_unauthenticated: bool) -> str:
    """The warning to print before serving ("" when a token exists).

    Open (loopback, no token): anyone on this machine may use the API. Beyond loopback with no
    token the server does not start, unless ``allow_unauthenticated`` (which opens only the
    webhooks: the run API then refuses every request until a token exists).

    Raises:
        ServeRefused: beyond loopback, no active token, and not ``allow_unauthenticated``.
    """
    if store.active_token_count():
        return ""
    if is_loopback_host(host):
        return (
            "warning: no API token exists, so anyone on this machine can start, cancel and "
            f"approve runs on port {port}; create one (`armature tokens create NAME --scope "
            "admin`) and the server requires tokens from then on"
        )
    if allow_unauthenticated:
        return (
            "warning: --allow-unauthenticated opens the webhooks only: the run API refuses "
            "every request until a token exists (`armature tokens create NAME --scope run`)"
        )
    raise ServeRefused(
        f"--host {host} would let anyone who can reach port {port} start and approve runs, "
        "and no API token exists: create one first (`armature tokens create NAME --scope run "
        "--scope read`; callers send `Authorization: Bearer <token>`)"
    )


def reserved_token_warning(store: TokenStore) -> str:
    """The warning to print about active tokens whose names are now reserved (they are
    refused: a decision made with one would read as Armature's own), or ""."""
    names = store.reserved_active()
    if not names:
        return ""
    listed = ", ".join(repr(n) for n in names)
    return (
        f"warning: the API token(s) {listed} have reserved names (Armature records them for "
        "its own deciders) and are refused; create a token named after who uses it (`armature "
        "tokens create NAME --scope ...`) and revoke these (`armature tokens revoke NAME`)"
    )
