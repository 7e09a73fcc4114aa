"""Preference tuning from episodes (SAO): a LoRA adapter trained with the DPO loss.

The trace store's successful and failed attempts on the same messages are the DPO pairs
``export.dpo_rows`` writes (a valid reply beats an invalid one; a higher judge score beats a
lower). :func:`train_dpo` trains a LoRA (or DoRA) adapter on them with the DPO loss of
Rafailov et al. (2023), written here on top of peft:

    loss = −log σ(β · [(log π(c) − log π_ref(c)) − (log π(r) − log π_ref(r))])

where ``π`` is the base model plus the adapter, ``π_ref`` the base model (the same peft
model inside ``disable_adapter()``), ``c``/``r`` the chosen/rejected reply and ``log π(·)``
the summed log-probability of the reply's tokens (and end of sequence) after the prompt.
``β`` (``PreferenceRequest.beta``, 0.1 by default) sets how far the adapter may move from the
base model: the loss saturates once the reward margin is a few ``1/β``.

DPO usually starts from a supervised policy: with ``PreferenceRequest.reference_adapter`` (an
SFT adapter) that adapter is merged into the base weights and frozen, the DPO adapter is a
zero-initialised delta trained on top (:mod:`armature_temporal.finetune.continual`), and
``π_ref`` — the model with the delta switched off — is base + SFT. The saved adapter holds
the SFT one under ``frozen/``, so what is served is SFT + delta.

Verification mirrors the fine-tune loop's held-out check: prompts are split by a hash (every
pair of a held-out prompt is held out, none trained on) and the report gives the held-out
**preference accuracy** — the share of held-out pairs whose implicit reward ranks chosen
above rejected — with a Wilson 95% interval, against the base model, whose implicit reward is 0
for every reply (50% by construction), and the measured share where each model simply gives
chosen the higher mean log-probability per reply token (paired per pair, bootstrap 95%
interval).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from armature_temporal.cache.evaluate import wilson
from armature_temporal.finetune.models import (
    Example,
    PreferencePair,
    PreferenceReport,
    PreferenceRequest,
)
from armature_temporal.finetune.train import (
    BATCH_SIZE,
    FinetuneError,
    _batch,
    _check_out_dir,
    _encode,
    _Encoded,
    batch_indices,
    lora_config,
    require_stack,
    save_adapter,
    setup_base,
    stack_frozen,
)
from armature_temporal.improve.propose import paired_verdict

__all__ = [
    "dpo_loss",
    "pairs_from_rows",
    "split_pairs",
    "train_dpo",
]

_IGNORE = -100


def pairs_from_rows(rows: Iterable[dict[str, Any]]) -> list[PreferencePair]:
    """:class:`PreferencePair` from ``dpo_rows`` rows (``prompt``, ``chosen``, ``rejected``).

    Raises:
        FinetuneError: a row lacks one of them, or chosen equals rejected.
    """
    out = []
    for index, row in enumerate(rows):
        missing = [k for k in ("prompt", "chosen", "rejected") if k not in row]
        if missing:
            raise FinetuneError(
                f"DPO row {index} lacks {missing}; rows come from dpo_rows (armature traces "
                "export --format dpo) with prompt, chosen and rejected"
            )
        if row["chosen"] == row["rejected"]:
            raise FinetuneError(
                f"DPO row {index}: chosen and rejected are the same reply {row['chosen']!r}; "
                "a pair needs two different replies"
            )
        runs = [str(row[k]) for k in ("run_id", "rejected_run_id") if row.get(k)]
        out.append(
            PreferencePair(
                prompt=[
                    {"role": str(m.get("role", "user")), "content": str(m.get("content") or "")}
                    for m in row["prompt"]
                ],
                chosen=str(row["chosen"]),
                rejected=str(row["rejected"]),
                run_ids=list(dict.fromkeys(runs)),
            )
        )
    return out


def _prompt_key(pair: PreferencePair) -> str:
    blob = json.dumps(pair.prompt, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def split_pairs(
    pairs: Sequence[PreferencePair], eval_share: float
) -> tuple[list[PreferencePair], list[PreferencePair]]:
    """Split deterministically by a hash of the prompt into ``(train, eval)``: every pair of
    a held-out prompt is held out. At least one prompt lands on each side; needs two distinct
    prompts."""
    by_prompt: dict[str, list[PreferencePair]] = {}
    for pair in pairs:
        by_prompt.setdefault(_prompt_key(pair), []).append(pair)
    if len(by_prompt) < 2:
        raise FinetuneError(
            f"preference tuning needs pairs on at least 2 distinct prompts (one to train on, "
            f"one to hold out), got {len(by_prompt)}"
        )
    keyed = sorted(by_prompt.items())
    share = min(max(eval_share, 0.0), 1.0)
    held = sum(1 for key, _ in keyed if int(key[:16], 16) / 2**64 < share)
    held = min(max(held, 1), len(keyed) - 1)
    train = [p for _, group in keyed[held:] for p in group]
    return train, [p for _, group in keyed[:held] for p in group]


def dpo_loss(
    torch: Any,
    policy_chosen: Any,
    policy_rejected: Any,
    ref_chosen: Any,
    ref_rejected: Any,
    beta: float,
) -> tuple[Any, Any]:
    """The mean DPO loss over a batch and the per-pair reward margins
    ``β·[(π_c − ref_c) − (π_r − ref_r)]`` (summed log-probabilities in, tensors out)."""
    margins = beta * ((policy_chosen - ref_chosen) - (policy_rejected - ref_rejected))
    return -torch.nn.functional.logsigmoid(margins).mean(), margins


def _sequence_logps(torch: Any, model: Any, batch: dict[str, Any]) -> Any:
    """Summed log-probability of each row's labelled (reply) tokens: a 1-D tensor."""
    return _sequence_stats(torch, model, batch)[0]


def _sequence_stats(torch: Any, model: Any, batch: dict[str, Any]) -> tuple[Any, Any]:
    """Each row's summed reply log-probability and its number of reply tokens."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    logps = torch.log_softmax(logits[:, :-1, :].float(), dim=-1)
    targets = batch["labels"][:, 1:]
    mask = targets != _IGNORE
    picked = torch.gather(logps, 2, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return (picked * mask).sum(dim=1), mask.sum(dim=1)


def _encoded(tokenizer: Any, pair: PreferencePair, limit: int) -> tuple[_Encoded, _Encoded]:
    def one(reply: str) -> _Encoded:
        return _encode(tokenizer, Example(messages=pair.prompt, reply=reply), limit)

    return one(pair.chosen), one(pair.rejected)


def _logps(
    torch: Any, model: Any, encoded: Sequence[tuple[_Encoded, _Encoded]], pad: int, device: Any
) -> tuple[Any, Any]:
    """(chosen, rejected) summed log-probabilities of each pair, with gradient if enabled."""
    flat = [e for pair in encoded for e in pair]
    values = _sequence_logps(torch, model, _batch(torch, flat, pad, device))
    return values[0::2], values[1::2]


def _measure(
    torch: Any, model: Any, encoded: Sequence[tuple[_Encoded, _Encoded]], pad: int, device: Any
) -> list[tuple[float, ...]]:
    """Per pair: summed log-probabilities (policy chosen, policy rejected, reference chosen,
    reference rejected), then the reply token counts (chosen, rejected)."""
    model.eval()
    rows: list[tuple[float, ...]] = []
    with torch.no_grad():
        for start in range(0, len(encoded), BATCH_SIZE):
            flat = [e for pair in encoded[start : start + BATCH_SIZE] for e in pair]
            batch = _batch(torch, flat, pad, device)
            policy, counts = _sequence_stats(torch, model, batch)
            with model.disable_adapter():
                reference, _ = _sequence_stats(torch, model, batch)
            for i in range(0, len(flat), 2):
                rows.append(
                    (
                        float(policy[i]),
                        float(policy[i + 1]),
                        float(reference[i]),
                        float(reference[i + 1]),
                        float(counts[i]),
                        float(counts[i + 1]),
                    )
                )
    return rows


def _check(request: PreferenceRequest) -> None:
    if request.rank < 1 or request.max_steps < 1:
        raise FinetuneError(
            f"rank and max_steps must be at least 1, got rank={request.rank}, "
            f"max_steps={request.max_steps}"
        )
    if not request.beta > 0:
        raise FinetuneError(f"beta must be above 0, got {request.beta!r}; DPO's usual is 0.1")


def train_dpo(
    request: PreferenceRequest, *, progress: Callable[[int, float], None] | None = None
) -> PreferenceReport:
    """Train an adapter on ``request.pairs`` with the DPO loss and save it to
    ``request.out_dir`` (peft's files plus ``armature.json``, whole or not at all); measure
    it on the held-out prompts' pairs (see the module docstring). ``progress(step, loss)``
    after every optimiser step. Blocking.

    Raises:
        FinetuneUnavailable: torch, transformers or peft is missing.
        FinetuneError: the base model, out_dir, pairs or settings are unusable.
    """
    started = time.monotonic()
    torch, _, peft = require_stack()
    out = _check_out_dir(request.out_dir)
    _check(request)
    train_set, eval_set = split_pairs(request.pairs, request.eval_share)
    model, tokenizer, device, limit, pad = setup_base(torch, request.base_model, request.seed)
    train_enc = [_encoded(tokenizer, p, limit) for p in train_set]
    eval_enc = [_encoded(tokenizer, p, limit) for p in eval_set]
    if request.reference_adapter is not None:
        # DPO from a supervised policy: the SFT adapter merged in and frozen, the DPO adapter
        # a zero-initialised delta on top (as a continual adapter, without the orthogonality
        # penalty: the delta is meant to refine the SFT policy, not to keep away from it).
        model, _ = stack_frozen(
            peft, model, request.reference_adapter, request.base_model, "reference_adapter"
        )
    config = lora_config(peft, model, request.rank, request.use_dora)
    model = peft.get_peft_model(model, config)
    # The reference: the same model with the adapter switched off (the base weights, and any
    # SFT adapter merged into them, are frozen, so once is enough).
    model.eval()
    with torch.no_grad(), model.disable_adapter():
        reference = [
            _logps(torch, model, train_enc[i : i + BATCH_SIZE], pad, device)
            for i in range(0, len(train_enc), BATCH_SIZE)
        ]
    ref_c = torch.cat([c for c, _ in reference])
    ref_r = torch.cat([r for _, r in reference])
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=request.learning_rate)
    batches = batch_indices(torch, len(train_enc), request.seed)
    losses: list[float] = []
    # Trained in eval mode: with the base model's dropout on, the policy would differ from
    # the (dropout-free) reference by noise alone. The adapter has no dropout of its own.
    model.eval()
    for step in range(1, request.max_steps + 1):
        picked = next(batches)
        pc, pr = _logps(torch, model, [train_enc[i] for i in picked], pad, device)
        index = torch.tensor(picked, device=device)
        loss, _ = dpo_loss(torch, pc, pr, ref_c[index], ref_r[index], request.beta)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.item()))
        if progress is not None:
            progress(step, losses[-1])

    measured = _measure(torch, model, eval_enc, pad, device)
    report = _report(request, out, losses, len(train_set), measured, device.type, started)
    meta = {**report.model_dump(mode="json"), "base_model": request.base_model, "method": "dpo"}
    save_adapter(model, request.out_dir, meta, frozen=request.reference_adapter)
    return report


def _report(
    request: PreferenceRequest,
    out: Path,
    losses: list[float],
    train_pairs: int,
    measured: list[tuple[float, ...]],
    device: str,
    started: float,
) -> PreferenceReport:
    n = len(measured)
    wins = sum(1 for pc, pr, rc, rr, _, _ in measured if (pc - rc) > (pr - rr))
    low, high = wilson(wins, n)
    # Per reply token, so a longer reply is not ranked lower for its length alone.
    base_right = [1.0 if rc / nc > rr / nr else 0.0 for _, _, rc, rr, nc, nr in measured]
    adapter_right = [1.0 if pc / nc > pr / nr else 0.0 for pc, pr, _, _, nc, nr in measured]
    diff, diff_low, diff_high = paired_verdict(base_right, adapter_right)
    margins = [request.beta * ((pc - rc) - (pr - rr)) for pc, pr, rc, rr, _, _ in measured]
    return PreferenceReport(
        adapter_dir=str(out),
        steps=request.max_steps,
        train_pairs=train_pairs,
        eval_pairs=n,
        beta=request.beta,
        train_loss_first=losses[0],
        train_loss_last=losses[-1],
        accuracy=wins / n,
        accuracy_low=low,
        accuracy_high=high,
        base_margin_accuracy=sum(base_right) / n,
        adapter_margin_accuracy=sum(adapter_right) / n,
        margin_diff=diff,
        margin_diff_low=diff_low,
        margin_diff_high=diff_high,
        mean_reward_margin=sum(margins) / n,
        seconds=round(time.monotonic() - started, 3),
        device=device,
        source_runs=sorted({r for pair in request.pairs for r in pair.run_ids}),
        reference_adapter=request.reference_adapter,
        reference=request.reference,
    )
