"""A Temporal server that fails mid-command gets one line with what to check, not a traceback."""

from __future__ import annotations

import pytest
import typer
from temporalio.service import RPCError, RPCStatusCode

from armature_temporal.commands._common import run_coroutine


def test_an_rpc_timeout_mid_command_is_one_line_and_exit_1(
    capsys: pytest.CaptureFixture[str],
) -> None:
    async def stuck() -> None:
        raise RPCError("Timeout expired", RPCStatusCode.UNKNOWN, b"")

    with pytest.raises(typer.Exit) as info:
        run_coroutine(stuck())
    assert info.value.exit_code == 1
    err = capsys.readouterr().err
    assert "the Temporal server did not complete the request (UNKNOWN: Timeout expired)" in err
    assert "armature doctor" in err and "Traceback" not in err
