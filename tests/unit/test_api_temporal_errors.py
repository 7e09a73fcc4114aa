"""The run API names a Temporal server that does not answer `temporal_unreachable`, as the
README documents, whether it was down at the first call or went away later (it answered
`temporal_error` then), and `temporal_error` only for a server that answered with a refusal."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.service import RPCError, RPCStatusCode

from armature_temporal.service.api.errors import ApiError
from armature_temporal.service.api.scope import answering


class _State:
    def __init__(self) -> None:
        self.plans: dict[str, Any] = {}


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (RPCStatusCode.UNAVAILABLE, "temporal_unreachable"),
        (RPCStatusCode.DEADLINE_EXCEEDED, "temporal_unreachable"),
        (RPCStatusCode.PERMISSION_DENIED, "temporal_error"),
        (RPCStatusCode.INVALID_ARGUMENT, "temporal_error"),
    ],
)
def test_a_server_that_went_away_is_unreachable_a_refusal_is_an_error(
    status: RPCStatusCode, code: str
) -> None:
    with pytest.raises(ApiError) as caught, answering(_State(), None):  # type: ignore[arg-type]
        raise RPCError("transport error", status, b"")
    assert caught.value.status == 503
    assert caught.value.code == code
