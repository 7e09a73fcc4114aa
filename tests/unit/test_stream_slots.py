"""The run API's stream slots (#25): per-token and overall caps answered 429 with the cap and
how to raise it, and the watcher that ends a revoked token's streams."""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from typing import Any

import pytest

from armature_temporal.service.api.errors import ApiError
from armature_temporal.service.api.principal import LOOPBACK, Principal
from armature_temporal.service.api.streams import RECHECK_S, StreamSlots

ALICE = Principal("alice", frozenset({"read"}))
BOB = Principal("bob", frozenset({"read"}))


class FakeAuthorizer:
    """Says which credentials still hold; counts how often it is asked."""

    def __init__(self, valid: set[str | None]) -> None:
        self.valid = valid
        self.asked = 0
        self.open = False

    def still_valid(self, credentials: Collection[str | None]) -> set[str | None]:
        self.asked += 1
        return {c for c in credentials if c in self.valid}


async def test_the_caps_per_token_and_overall_say_which_and_how_to_raise_them() -> None:
    auth: Any = FakeAuthorizer({"a", "b"})
    slots = StreamSlots(max_streams=3, per_token=2)
    held = [slots.acquire(ALICE, "a", auth), slots.acquire(ALICE, "a", auth)]
    with pytest.raises(ApiError) as mine:
        slots.acquire(ALICE, "a", auth)
    assert (mine.value.status, mine.value.code) == (429, "too_many_streams")
    assert "token 'alice' has 2 event streams open" in mine.value.message
    assert "--max-streams-per-token" in mine.value.fix
    assert mine.value.headers and mine.value.headers["Connection"] == "close"
    held.append(slots.acquire(BOB, "b", auth))
    with pytest.raises(ApiError) as full:
        slots.acquire(BOB, "b", auth)
    assert "this server has 3 event streams open" in full.value.message
    assert "--max-streams N" in full.value.fix
    slots.release(held[0])
    slots.release(held[0])  # twice is harmless
    held[0] = slots.acquire(BOB, "b", auth)
    assert slots.open_count() == 3 and slots.open_count("bob") == 2
    for lease in held:
        slots.release(lease)


async def test_the_watcher_ends_a_revoked_tokens_streams_only_and_stops_when_none_is_open() -> None:
    auth: Any = FakeAuthorizer({"a", "b", None})
    slots = StreamSlots()
    a = slots.acquire(ALICE, "a", auth)
    b = slots.acquire(BOB, "b", auth)
    open_server = slots.acquire(LOOPBACK, None, auth)
    await asyncio.sleep(RECHECK_S * 2.5)
    assert not (a.ended.is_set() or b.ended.is_set() or open_server.ended.is_set())
    auth.valid = {"b"}
    await asyncio.wait_for(a.ended.wait(), RECHECK_S * 4)
    await asyncio.wait_for(open_server.ended.wait(), RECHECK_S * 4)
    assert "'alice' was revoked" in a.why
    assert "now requires a token" in open_server.why
    assert not b.ended.is_set()
    for lease in (a, b, open_server):
        slots.release(lease)
    await asyncio.sleep(RECHECK_S * 2)
    asked = auth.asked
    await asyncio.sleep(RECHECK_S * 3)
    assert auth.asked == asked, "no stream open: nobody is asked"
