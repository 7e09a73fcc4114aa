"""The bandits that choose stages' arms: ``armature bandit show|history`` and ``armature
reward`` (a reward from outside, for stages with ``reward: external``)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer
from rich.text import Text

from armature_temporal.commands._common import LEARN, JsonFlag, fail, out, print_json

if TYPE_CHECKING:
    from armature_temporal.bandit import BanditRuntime

app = typer.Typer()


bandit_app = typer.Typer(help="Inspect the bandits that choose stages' arms.", no_args_is_help=True)
app.add_typer(bandit_app, name="bandit", rich_help_panel=LEARN)


def _bandit(name: str) -> BanditRuntime:
    from activities.bandit import runtime_for
    from armature_temporal.bandit import BanditError

    try:
        return runtime_for(name)
    except BanditError as exc:
        raise fail(f"error: {exc} (a spec stage's bandit is named <spec>:<stage>)", 2) from None


@bandit_app.command("show")
def bandit_show(
    name: Annotated[
        str, typer.Argument(help="Bandit name: <spec>:<stage> for spec arms.", metavar="NAME")
    ],
    context: Annotated[
        str | None,
        typer.Option("--context", help='A context as JSON (e.g. \'{"task": "triage"}\').'),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Each arm's pulls, rewards, posterior mean with 95% interval, and P(best)."""
    ctx = None
    if context is not None:
        try:
            ctx = json.loads(context)
        except ValueError:
            raise fail(f"error: --context {context!r} is not JSON", 2) from None
    arms = _bandit(name).arms(ctx)
    if as_json:
        print_json([a.model_dump(mode="json") for a in arms])
        return
    from rich.table import Table

    table = Table(
        title=f"bandit {name}" + (f" · context {context}" if context else ""),
        show_edge=False,
        pad_edge=False,
    )
    for col in ("arm", "status", "pulls", "rewarded", "mean", "95% interval", "P(best)"):
        table.add_column(col)
    for arm in sorted(arms, key=lambda a: -a.p_best):
        table.add_row(
            Text(arm.arm_id),
            arm.status,
            str(arm.pulls),
            f"{arm.reward_sum:.1f}",
            f"{arm.mean:.3f}",
            f"[{arm.low:.3f}, {arm.high:.3f}]",
            f"{arm.p_best:.2f}",
        )
    out.print(table)


@bandit_app.command("history")
def bandit_history(
    name: Annotated[str, typer.Argument(help="Bandit name.", metavar="NAME")],
    as_json: JsonFlag = False,
) -> None:
    """The learning curve: posterior snapshots taken by bandit maintenance."""
    snapshots = _bandit(name).history()
    if as_json:
        print_json([s.model_dump(mode="json") for s in snapshots])
        return
    if not snapshots:
        out.print(
            f"no snapshots for {name} yet; maintenance takes them (armature schedule SPEC "
            "sets it up for specs with arms)",
            markup=False,
        )
        return
    for snap in snapshots:
        where = "" if snap.context in ("", "global") else f"  context {snap.context}"
        out.print(
            f"{snap.taken_at[:19]}  {snap.arm_id:<20} pulls {snap.pulls:<6} "
            f"mean {snap.mean:.3f}  [{snap.low:.3f}, {snap.high:.3f}]  "
            f"p_best {snap.p_best:.2f}{where}",
            markup=False,
            highlight=False,
        )


@app.command(rich_help_panel=LEARN)
def reward(
    decision_id: Annotated[
        str,
        typer.Argument(
            help="The decision id (from a trace or runtime_select).", metavar="DECISION_ID"
        ),
    ],
    value: Annotated[float, typer.Argument(help="Reward in [0, 1].", metavar="VALUE")],
    bandit: Annotated[
        str | None,
        typer.Option("--bandit", help="Bandit name (default: the part of DECISION_ID before '@')."),
    ] = None,
) -> None:
    """Reward a bandit decision from outside (stages with reward: external). Once per decision;
    values outside [0, 1] are refused."""
    from armature_temporal.bandit import BanditError

    name = bandit or decision_id.partition("@")[0]
    try:
        receipt = _bandit(name).update(decision_id, value)
    except BanditError as exc:
        raise fail(f"error: {exc}", 2) from None
    out.print(
        f"rewarded {decision_id} with {value:g}"
        + (" (change detected: posteriors reset)" if receipt.change_detected else ""),
        markup=False,
    )
