"""The spec interpreter's collaborators: one concept a module, each deterministic.

``RunSpecWorkflow`` (workflows/run_spec.py) keeps the Temporal surface — run, the gate update,
signal and status query, the DAG loop — and delegates the rest:

- ``state``: ``RunContext``, everything one run knows (results, outputs, gates, arm choices);
- ``tracing``: ``Tracer``, the run's hash-chained trace records and their flushes;
- ``gates``: ``Gates``, durable waits for a person's decision;
- ``tools``: ``ToolCalls``, tool activities under the safety policy (and their approvals);
- ``arms``: ``Arms``, bandit arm selection and rewards;
- ``llm``: ``LLMStages``, model calls: attempts, retries, escalation, loops, tool turns;
- ``fanout``: ``FanOut``, child runs and fan-in;
- ``adapters``: ``Adapters``, spec adapters (scripts, Python functions) under the safety policy;
- ``memory``: ``Memory``, cross-run memory loaded at the start and captured after stages;
- ``lessons``: ``LessonMemory``, the heuristics memory's lessons loaded per LLM stage execution and
  rewarded with the stage's outcome (``experience:``);
- ``evaluation``: ``Evaluations``, a stage's ``evaluate`` criteria judged after the run;
- ``critic``: ``Critic``, the experience critic's score and evidence per stage after the run;
- ``failures``: how a stage fails (``StageFailure``) and how activity failures are classified;
- ``retries``: infrastructure faults retried within a call's deadline, provider failures on a
  budget the workflow counts (``call_llm``).

They run inside the workflow (no I/O, time from ``workflow.now()``, every effect an activity)
and hold no module-level state, so the worker can pass them through the sandbox (see
``worker.workflow_runner``).
"""

from workflows.interpreter.adapters import Adapters
from workflows.interpreter.arms import Arms
from workflows.interpreter.critic import Critic
from workflows.interpreter.evaluation import Evaluations
from workflows.interpreter.failures import GateRejected, StageFailure, classify
from workflows.interpreter.fanout import FanOut
from workflows.interpreter.gates import Gates
from workflows.interpreter.lessons import LessonMemory
from workflows.interpreter.llm import LLMStages
from workflows.interpreter.memory import Memory
from workflows.interpreter.state import RunContext
from workflows.interpreter.tools import ToolCalls
from workflows.interpreter.tracing import Tracer

__all__ = [
    "Adapters",
    "Arms",
    "Critic",
    "Evaluations",
    "FanOut",
    "GateRejected",
    "Gates",
    "LLMStages",
    "LessonMemory",
    "Memory",
    "RunContext",
    "StageFailure",
    "ToolCalls",
    "Tracer",
    "classify",
]
