"""The improvement loop: diagnose a spec from its traces, propose changes, verify them.

``diagnose`` (what a spec version's traces say about each stage), ``propose`` (candidate
changes read off a diagnosis, and the paired verdict on each), ``refine`` (the LLM refiner's
prompt, the strict reading of its reply and the screen its proposals pass), ``edit`` (apply a
change to the spec's YAML, touching only the lines it changes), ``models`` (the data that
travels through Temporal and into the store) and ``render`` (how the CLI shows it).
"""

from armature_temporal.improve.diagnose import diagnose
from armature_temporal.improve.edit import EditError, apply_changes
from armature_temporal.improve.models import (
    Diagnosis,
    ImproveInput,
    ImproveResult,
    Proposal,
    SpecChange,
)
from armature_temporal.improve.propose import candidates, paired_verdict

__all__ = [
    "Diagnosis",
    "EditError",
    "ImproveInput",
    "ImproveResult",
    "Proposal",
    "SpecChange",
    "apply_changes",
    "candidates",
    "diagnose",
    "paired_verdict",
]
