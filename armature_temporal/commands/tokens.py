"""The run API's tokens: ``armature tokens create|list|revoke``.

Tokens live (hashed) in the trace store, where ``armature serve`` reads them: creating the
first one closes an open loopback server within a second, revoking one refuses it within a
second. The plain token is printed once, by ``create``.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from armature_temporal.commands._common import (
    STACK,
    JsonFlag,
    err,
    fail,
    open_store,
    out,
    print_json,
    print_wide,
)
from armature_temporal.errors import ArmatureError

app = typer.Typer()

tokens_app = typer.Typer(
    help="API tokens for `armature serve` (scopes: read, run, approve, admin): create (shown "
    "once), list (never the secrets), revoke.",
    no_args_is_help=True,
)
app.add_typer(tokens_app, name="tokens", rich_help_panel=STACK)

NameArg = Annotated[
    str,
    typer.Argument(
        help="The token's name: decisions made with it record it (e.g. ci-bot, alice). Names "
        "Armature records for its own deciders (loopback, signal, timeout, system, anonymous, "
        "armature...) are refused.",
        show_default=False,
    ),
]


def _writable_store() -> Any:
    """The trace store itself (created if need be: a token must outlive this command)."""
    from armature_temporal.store import TraceStore

    try:
        return TraceStore()
    except ArmatureError as exc:
        raise fail(f"error: {exc}", 1) from None


@tokens_app.command("create")
def create(
    name: NameArg,
    scopes: Annotated[
        list[str],
        typer.Option(
            "--scope",
            "-s",
            help="A scope the token holds; repeat for more. read: specs, runs, events, gates. "
            "run: start and cancel runs. approve: decide gates. admin: all of them.",
            show_default=False,
        ),
    ],
    as_json: JsonFlag = False,
) -> None:
    """Create a token and print it once (it is stored only as a hash and cannot be shown
    again). Callers send it as `Authorization: Bearer <token>`.

    A loopback `armature serve` with no tokens answers anyone on the machine; once a token
    exists, every request needs one (the server notices within a second).

    Example: armature tokens create ci-bot --scope run --scope read
    """
    store = _writable_store()
    try:
        token = store.create_token(name, scopes)
        scopes_held = next(t.scopes for t in store.list_tokens() if t.name == name)
    except ArmatureError as exc:
        raise fail(f"error: {exc}", 2) from None
    finally:
        store.close()
    if as_json:
        print_json({"name": name, "scopes": scopes_held, "token": token})
        return
    out.print(token, markup=False, highlight=False, soft_wrap=True)
    err.print(
        f"created token {name!r} with scopes {', '.join(scopes_held)}. It is shown this once: "
        "keep it in a secret store. Use it as\n"
        f'  curl -H "Authorization: Bearer $ARMATURE_TOKEN" http://127.0.0.1:8787/workflows\n'
        f"Revoke it with `armature tokens revoke {name}`.",
        markup=False,
        highlight=False,
    )


@tokens_app.command("list")
def list_tokens(as_json: JsonFlag = False) -> None:
    """List the tokens: name, scopes, created, last used, revoked. Never the secrets."""
    store, where = open_store()
    try:
        tokens = store.list_tokens()
    finally:
        store.close()
    if as_json:
        print_json({"tokens": [t.model_dump(mode="json") | {"active": t.active} for t in tokens]})
        return
    if not tokens:
        out.print(
            f"no API tokens (store {where}); create one with `armature tokens create NAME "
            "--scope read`",
            markup=False,
            highlight=False,
        )
        return
    from rich.table import Table

    table = Table(title=f"API tokens (store {where})", title_justify="left")
    for column in ("name", "scopes", "created", "last used", "revoked"):
        table.add_column(column, no_wrap=True)
    for t in tokens:
        table.add_row(
            t.name,
            ",".join(t.scopes),
            t.created_at[:19],
            (t.last_used_at or "never")[:19],
            (t.revoked_at or "")[:19],
        )
    print_wide(table)


@tokens_app.command("revoke")
def revoke(name: NameArg, as_json: JsonFlag = False) -> None:
    """Revoke a token: a running server refuses it, and ends its open event streams, within a
    second. Its name stays taken (decisions recorded under it stay unambiguous).

    Example: armature tokens revoke ci-bot
    """
    store = _writable_store()
    try:
        before = next((t for t in store.list_tokens() if t.name == name), None)
        if before is not None and before.revoked_at is not None:
            raise fail(
                f"error: token {name!r} is already revoked ({before.revoked_at}); nothing "
                "changed (`armature tokens list` shows which are active)",
                2,
            )
        token = store.revoke_token(name)
        remaining = store.active_token_count()
    except ArmatureError as exc:
        raise fail(f"error: {exc}", 1) from None
    finally:
        store.close()
    if as_json:
        print_json(token.model_dump(mode="json") | {"active": False, "active_tokens": remaining})
        return
    note = (
        "; no active token is left, so a loopback server is open to anyone on this machine"
        if remaining == 0
        else ""
    )
    out.print(f"revoked token {name!r} ({token.revoked_at}){note}", markup=False, highlight=False)
