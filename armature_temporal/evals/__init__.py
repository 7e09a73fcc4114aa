"""``armature eval``: a person's own test cases, in promptfoo's file shape, run on a spec.

- :mod:`~armature_temporal.evals.cases`: the cases file (``tests``, ``vars``, ``assert``,
  ``defaultTest``, ``repeat``), loaded and checked with file:line errors.
- :mod:`~armature_temporal.evals.assertions`: the assertion types and their graders.
- :mod:`~armature_temporal.evals.judge`: ``llm-rubric``'s judge (a tier of the spec).
- :mod:`~armature_temporal.evals.runner`: runs each case × repeat as a verification run and
  grades it.
- :mod:`~armature_temporal.evals.stats`: pass@k, flakiness, the paired comparison.
- :mod:`~armature_temporal.evals.models`: the results; :mod:`~armature_temporal.evals.junit`:
  JUnit XML; :mod:`~armature_temporal.evals.dashboard`: the dashboard's evals part.
"""

from armature_temporal.evals.assertions import ASSERTION_TYPES
from armature_temporal.evals.cases import CasesError, load_cases
from armature_temporal.evals.models import CaseResult, EvalResult
from armature_temporal.evals.runner import run_eval
from armature_temporal.evals.stats import pass_at_k

__all__ = [
    "ASSERTION_TYPES",
    "CaseResult",
    "CasesError",
    "EvalResult",
    "load_cases",
    "pass_at_k",
    "run_eval",
]
