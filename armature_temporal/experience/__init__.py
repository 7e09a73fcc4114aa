"""Experience: the heuristics memory of issue #15 — lessons learnt from earlier runs (or
written by a person), screened, replay-tested and only then put in prompts.

- :mod:`~armature_temporal.experience.models`: :class:`Heuristic`, :class:`HeuristicEvent`,
  the statuses and the moves between them.
- :mod:`~armature_temporal.experience.embeddings`: :func:`get_embedder` (local model, lexical
  fallback, or a litellm embedding model) and :func:`cosine`.
- :mod:`~armature_temporal.experience.immune`: :func:`screen`, the scanner over a lesson (its
  lesson profile), and which findings reject.
- :mod:`~armature_temporal.experience.admit`: :func:`admit` (scan, merge, quarantine) and
  :func:`rescreen` (today's scan over what waits and what is promoted).
- :mod:`~armature_temporal.experience.gate`: :func:`prompt_lessons`, which of the lessons asked
  for may enter one prompt (quarantine is not admission).
- :mod:`~armature_temporal.experience.critic`, :mod:`~.distill`, :mod:`~.verify`,
  :mod:`~.learning`: the learning round (``armature learn``, the ``Learn`` workflow): the
  post-run critic, distillation from scored trajectories, memory CI's Holm-adjusted paired
  decisions, and the round's data.

The store keeps them (:mod:`armature_temporal.store.heuristics`); ``armature memory`` shows
and changes them. Not to be confused with the spec's ``memory:`` (cross-run values).
"""

from armature_temporal.experience.admit import MERGE_SIMILARITY, Admission, admit, rescreen
from armature_temporal.experience.embeddings import Embedder, cosine, get_embedder
from armature_temporal.experience.gate import prompt_lessons
from armature_temporal.experience.immune import screen
from armature_temporal.experience.models import (
    HEURISTIC_KINDS,
    HEURISTIC_STATUSES,
    Heuristic,
    HeuristicError,
    HeuristicEvent,
    HeuristicKind,
    HeuristicStatus,
    allowed_transitions,
    heuristic_id,
)

__all__ = [
    "HEURISTIC_KINDS",
    "HEURISTIC_STATUSES",
    "MERGE_SIMILARITY",
    "Admission",
    "Embedder",
    "Heuristic",
    "HeuristicError",
    "HeuristicEvent",
    "HeuristicKind",
    "HeuristicStatus",
    "admit",
    "allowed_transitions",
    "cosine",
    "get_embedder",
    "heuristic_id",
    "prompt_lessons",
    "rescreen",
    "screen",
]
