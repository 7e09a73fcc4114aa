"""``LedgerAnchor``: one long-lived workflow per trace database that keeps its ledger's heads.

Workers signal each new ledger head (``head``, with the store id, the genesis entry's hash, the
entry's seq and hash, and the runs started so far); the workflow folds them with
:func:`~armature_temporal.runtime.ledger_anchor.advance` and continues as new, carrying only its
state, before its history grows large. It calls no activity and never ends by itself.
``armature traces verify`` reads the heads from its history (a worker need not be running).
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from armature_temporal.runtime.ledger_anchor import (
        HEAD_SIGNAL,
        LEDGER_ANCHOR_WORKFLOW,
        LedgerAnchorState,
        LedgerHead,
        advance,
    )

__all__ = ["LedgerAnchorWorkflow"]


@workflow.defn(name=LEDGER_ANCHOR_WORKFLOW)
class LedgerAnchorWorkflow:
    """The heads of one database's ledger, as Temporal received them."""

    @workflow.init
    def __init__(self, state: LedgerAnchorState) -> None:
        self._state = state
        self._folded = 0

    @workflow.signal(name=HEAD_SIGNAL)
    def head(self, head: LedgerHead) -> None:
        self._state = advance(self._state, head, workflow.now().isoformat())
        self._folded += 1

    @workflow.query(name="state")
    def state(self) -> LedgerAnchorState:
        return self._state

    @workflow.run
    async def run(self, state: LedgerAnchorState) -> None:
        await workflow.wait_condition(
            lambda: (
                self._folded >= self._state.continue_after
                or workflow.info().is_continue_as_new_suggested()
            )
        )
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(self._state)
