"""The workflow sandbox, without two per-payload costs the SDK's runner pays.

Temporal's :class:`~temporalio.worker.workflow_sandbox.SandboxedWorkflowRunner` runs every call
into a workflow's sandbox as Python *source*: it compiles a two-line string and ``exec`` s it
with the sandbox's importer applied. The worker makes such a call for each workflow activation
and — through the command-aware data converter — two to four for *every payload* the workflow
sends or receives (which serialization context and which external-store target the payload
belongs to). A 5-stage run makes about seventy of them; measured with ``py-spy`` on this
project's ``benchmarks/engine_overhead.py``, they were a quarter of the worker's event-loop
thread.

:class:`FastSandboxRunner` is the same sandbox with the same restrictions, and two changes:

* each distinct piece of source is compiled once per process (the strings are the SDK's own
  and few: one per activation kind, one per workflow class at instance creation), then the
  code object is ``exec`` 'd exactly as the SDK would the source;
* the two context lookups call the in-sandbox object's method directly, without the
  importer. They are the SDK's bookkeeping (a dictionary lookup by command sequence number
  and a small frozen dataclass built from the workflow's info); no workflow code runs and
  nothing is imported. Nexus operations, which may consult a registry of system endpoints,
  keep the SDK's path.

Both rest on the SDK's private ``_Instance`` (its ``_run_code``, ``globals_and_locals`` and
``importer``). :func:`fast_path_available` checks that shape; where a future SDK changes it,
the runner quietly behaves as the SDK's own (``tests/workflows/test_sandbox_runner.py`` fails
first, naming the change).
"""

from __future__ import annotations

import threading
from types import CodeType
from typing import Any

import temporalio.workflow
from temporalio.api.enums.v1 import CommandType
from temporalio.worker import WorkflowInstance, WorkflowInstanceDetails
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner
from temporalio.worker.workflow_sandbox import _runner as sdk_runner

__all__ = ["FastSandboxRunner", "fast_path_available"]

#: The name under which the SDK keeps the in-sandbox object in the sandbox's globals.
_IN_SANDBOX = "__temporal_in_sandbox"
#: Distinct sources compiled at most; past it a source is compiled per call, as the SDK does.
_MAX_CODES = 512
_codes: dict[str, CodeType] = {}
_codes_lock = threading.Lock()


def _compiled(source: str) -> CodeType:
    code = _codes.get(source)
    if code is None:
        code = compile(source, "<string>", "exec")
        with _codes_lock:
            if len(_codes) < _MAX_CODES:
                _codes[source] = code
    return code


#: The SDK's sandbox instance class (None if a future SDK renames it).
_SDKInstance: Any = getattr(sdk_runner, "_Instance", None)


def fast_path_available() -> bool:
    """Whether the installed SDK's sandbox instance has the shape this runner relies on."""
    instance = _SDKInstance
    return (
        isinstance(instance, type)
        and issubclass(instance, WorkflowInstance)
        and all(
            callable(getattr(instance, name, None))
            for name in ("_run_code", "get_serialization_context", "get_external_store_context")
        )
    )


class _FastInstance(_SDKInstance or WorkflowInstance):  # type: ignore[misc]
    _current_thread_id: int | None

    def _run_code(self, code: str, **extra_globals: Any) -> None:
        # The SDK's _run_code, with the compiled source reused.
        scope = self.globals_and_locals
        scope.update(extra_globals)
        try:
            temporalio.workflow.unsafe._set_in_sandbox(True)
            self._current_thread_id = threading.get_ident()
            exec(_compiled(code), scope, scope)
        finally:
            temporalio.workflow.unsafe._set_in_sandbox(False)
            self._current_thread_id = None
            for name in extra_globals:
                scope.pop(name, None)

    def _direct(self, command_info: Any) -> Any:
        """The in-sandbox object, where a context lookup may call it directly; else None."""
        if (
            command_info is not None
            and command_info.command_type == CommandType.COMMAND_TYPE_SCHEDULE_NEXUS_OPERATION
        ):
            return None
        return self.globals_and_locals.get(_IN_SANDBOX)

    def get_serialization_context(self, command_info: Any) -> Any:
        inner = self._direct(command_info)
        if inner is None:
            return super().get_serialization_context(command_info)
        return inner.get_serialization_context(command_info)

    def get_external_store_context(self, command_info: Any) -> Any:
        inner = self._direct(command_info)
        if inner is None:
            return super().get_external_store_context(command_info)
        return inner.get_external_store_context(command_info)


class FastSandboxRunner(SandboxedWorkflowRunner):
    """:class:`SandboxedWorkflowRunner` with compiled calls and direct context lookups (see
    the module's docstring); the SDK's own runner where its sandbox has another shape."""

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        if not fast_path_available():
            return super().create_instance(det)
        return _FastInstance(det, self.runner_class, self.restrictions)
