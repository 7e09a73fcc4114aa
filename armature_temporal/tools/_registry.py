"""Finding tools by name: the registry and ``register_tool`` (``call_tool`` is in ``_call``).

A name resolves, in order, to a built-in (:data:`BUILTIN_NAMES`), a tool registered in the
registry (by ``register_tool``, or by a tool module's ``register(registry)``), or
``module:function``: the module is imported (which runs its ``@register_tool`` decorators) and
the function looked up. A function registered with ``@register_tool`` keeps its reversibility
and postcondition under its ``module:function`` name too. A plain function nobody registered
gets reversibility ``"none"``: Armature cannot know what it does.

Tool modules (a spec's ``tools: [{module: pkg.mod}]``, as armature-agents 0.7.0 wrote them)
are imported by :func:`load_tool_modules`, once per registry (so once per worker process), and
their ``register(registry)`` is handed the :class:`ToolRegistry`, whose ``register(descriptor)``
takes a 0.7.0 ``ToolDescriptor`` (see :mod:`armature_temporal.tools.compat`).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar, overload

from pydantic import ValidationError

from armature_temporal.errors import did_you_mean
from armature_temporal.runtime.policy import REVERSIBILITY_FIELD
from armature_temporal.tools._base import Postcondition, ToolImpl
from armature_temporal.tools._errors import ToolError
from armature_temporal.tools._files import FILE_TOOLS
from armature_temporal.tools._http import HTTP_TOOL
from armature_temporal.tools._legacy import descriptor_tool, is_descriptor
from armature_temporal.tools._models import Reversibility, ToolContext, ToolSpec
from armature_temporal.tools._python import function_tool
from armature_temporal.tools._resolved import resolving
from armature_temporal.tools._shell import SHELL_TOOL

__all__ = [
    "BUILTIN_NAMES",
    "ToolRegistry",
    "get_tool_spec",
    "load_tool_modules",
    "policy_args",
    "register_tool",
    "resolved_fields",
    "tool_arg_fields",
    "tool_pseudo_fields",
    "tool_reversibility",
]

F = TypeVar("F", bound=Callable[..., Any])


_BUILTINS: tuple[ToolImpl, ...] = (*resolving(FILE_TOOLS, SHELL_TOOL), HTTP_TOOL)
BUILTIN_NAMES: tuple[str, ...] = tuple(t.spec.name for t in _BUILTINS)
#: ``module:function``, as the spec checks accept it.
PY_TOOL = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_NAME = re.compile(r"^[A-Za-z_][\w.-]*$")
#: Attribute @register_tool sets on the function: its ToolImpl.
_TAG = "__armature_tool__"


class ToolRegistry:
    """Tools by name. The process-wide one (``ToolRegistry.default()``) is what
    ``register_tool``, ``get_tool_spec`` and ``call_tool`` use unless given another; a fresh
    registry holds the built-ins only, which isolates tests."""

    _default: ToolRegistry | None = None

    def __init__(self) -> None:
        self._tools: dict[str, ToolImpl] = {t.spec.name: t for t in _BUILTINS}
        self._sources: dict[str, str] = {}  # registered name -> module.qualname of its function
        self._imported: dict[str, ToolImpl] = {}  # module:function names resolved by import
        self._modules: dict[str, list[str]] = {}  # loaded tool module -> the names it registered
        self._loading: list[str] | None = None  # names registered by the module being loaded
        self._lock = threading.RLock()

    @classmethod
    def default(cls) -> ToolRegistry:
        """The process-wide registry."""
        if cls._default is None:
            cls._default = cls()
        return cls._default

    def names(self) -> list[str]:
        """Built-in and registered tool names (module:function tools resolve on demand)."""
        return list(self._tools)

    def modules(self) -> dict[str, list[str]]:
        """The tool modules loaded into this registry, each with the tool names it registered."""
        return {module: list(names) for module, names in self._modules.items()}

    def _check_name(self, name: str, source: str) -> None:
        if name in BUILTIN_NAMES:
            raise ToolError(
                f"tool name {name!r} is a built-in tool's; pick another name (built-ins cannot "
                "be replaced: they carry the workspace and host sandbox)"
            )
        if not (_NAME.match(name) or PY_TOOL.match(name)):
            raise ToolError(
                f"tool name {name!r} is not usable; use letters, digits, _ . - "
                "(starting with a letter or _), or module:function"
            )
        if self._sources.get(name, source) != source:
            raise ToolError(
                f"tool {name!r} is already registered for {self._sources[name]}; pick another name"
            )

    def _store(self, name: str, impl: ToolImpl, source: str) -> None:
        with self._lock:
            self._check_name(name, source)
            self._tools[name] = impl
            self._sources[name] = source
            self._imported.pop(name, None)
            if self._loading is not None:
                self._loading.append(name)

    def register(self, descriptor: Any) -> None:
        """Register a tool the way an armature-agents 0.7.0 tool module does.

        ``descriptor`` is a ``ToolDescriptor`` (:mod:`armature_temporal.tools.compat`'s, or the
        0.7.0 package's own): ``name``, ``description``, ``permission``, ``handler`` (a function
        of one ``args`` dict, async or not), ``parameters``, ``reversibility`` and
        ``postcondition``. Registering the same handler under its name again is a no-op.

        Raises:
            ToolError: not a descriptor, a built-in's name, a name taken by another handler, or
                fields 0.7.0 would not have accepted.
        """
        if not is_descriptor(descriptor):
            raise ToolError(
                f"registry.register takes a ToolDescriptor (name, description, permission, "
                f"handler, parameters), got {descriptor!r}; see armature_temporal.tools.compat, "
                "or use register_tool for a plain Python function"
            )
        impl = descriptor_tool(descriptor)
        handler = descriptor.handler
        source = f"{getattr(handler, '__module__', '?')}.{getattr(handler, '__qualname__', '?')}"
        self._store(impl.spec.name, impl, source)

    def get(self, name: str) -> ToolSpec | None:
        """The spec of a built-in or registered tool, or None (0.7.0's ``registry.get``)."""
        impl = self.cached(name)
        return impl.spec if impl is not None else None

    def descriptors(self) -> list[dict[str, Any]]:
        """Name, description and parameters of every built-in and registered tool."""
        return [
            {
                "name": t.spec.name,
                "description": t.spec.description,
                "parameters": t.spec.parameters,
            }
            for t in self._tools.values()
        ]

    def load_module(self, module_name: str) -> list[str]:
        """Import a tool module and call its ``register(self)``, once per registry.

        Returns:
            The tool names the module registered.

        Raises:
            ToolError: the module cannot be imported, has no ``register``, or its ``register``
                raised; the module is not marked loaded, so a later call tries again.
        """
        with self._lock:
            if module_name in self._modules:
                return list(self._modules[module_name])
            _alias_older_imports()
            try:
                module = importlib.import_module(module_name)
            except ImportError as exc:
                raise ToolError(_import_failure(module_name, exc)) from exc
            except Exception as exc:
                raise ToolError(
                    f"tool module {module_name!r}: importing it raised {type(exc).__name__}: {exc}"
                ) from exc
            register = getattr(module, "register", None)
            if not callable(register):
                raise ToolError(
                    f"tool module {module_name!r} has no register(registry) function; a tool "
                    "module defines def register(registry): registry.register(ToolDescriptor("
                    "name=..., description=..., permission=..., handler=..., parameters=...))"
                )
            self._loading = []
            try:
                register(self)
            except ToolError as exc:
                raise ToolError(f"tool module {module_name!r}: {exc}") from exc
            except Exception as exc:
                raise ToolError(
                    f"tool module {module_name!r}: register(registry) raised "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            finally:
                names, self._loading = self._loading, None
            self._modules[module_name] = names
            return list(names)

    def add(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        reversibility: Reversibility = "none",
        postcondition: Postcondition | None = None,
    ) -> ToolSpec:
        """Register ``fn`` as a tool; see :func:`register_tool`."""
        if not callable(fn):
            raise ToolError(f"register_tool needs a function, got {fn!r}")
        source = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
        name = name or f"{getattr(fn, '__module__', '')}:{getattr(fn, '__name__', '')}"
        self._check_name(name, source)
        impl = function_tool(
            fn,
            name=name,
            description=description,
            reversibility=reversibility,
            postcondition=postcondition,
        )
        self._store(name, impl, source)
        with contextlib.suppress(AttributeError, TypeError):  # e.g. a builtin function
            setattr(fn, _TAG, impl)
        return impl.spec

    def cached(self, name: str) -> ToolImpl | None:
        """The tool if it resolves without importing anything, else None."""
        return self._tools.get(name) or self._imported.get(name)

    def resolve(self, name: str) -> ToolImpl:
        """The tool called ``name``; imports the module of a module:function name.

        Raises:
            ToolError: the name is unknown, or its module or function cannot be loaded.
        """
        if (impl := self.cached(name)) is not None:
            return impl
        if not PY_TOOL.match(name):
            known = self.names()
            loaded = f" (tool modules loaded: {sorted(self._modules)})" if self._modules else ""
            raise ToolError(
                f"unknown tool {name!r}; known tools: {known}{loaded}; name a Python function "
                f"as module:function, or register {name!r} in a tool module the spec lists "
                f"under tools: [{{module: ...}}]{did_you_mean(name, known)}"
            )
        module_name, function_name = name.split(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ToolError(
                f"tool {name!r}: cannot import module {module_name!r}: {exc}; check the name "
                "and that the module is importable by the worker (on sys.path)"
            ) from exc
        except Exception as exc:
            raise ToolError(
                f"tool {name!r}: importing module {module_name!r} failed: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if (impl := self._tools.get(name)) is not None:  # registered while importing
            return impl
        fn = getattr(module, function_name, None)
        if not callable(fn):
            functions = [
                n
                for n, v in vars(module).items()
                if inspect.isfunction(v) and not n.startswith("_")
            ]
            raise ToolError(
                f"tool {name!r}: module {module_name!r} has no function {function_name!r}; "
                f"its functions: {sorted(functions)}{did_you_mean(function_name, functions)}"
            )
        tagged = getattr(fn, _TAG, None)
        if isinstance(tagged, ToolImpl):
            impl = tagged.renamed(name)
        else:
            impl = function_tool(fn, name=name, reversibility="none")
        self._imported[name] = impl
        return impl


@overload
def register_tool(
    fn: F,
    *,
    name: str | None = None,
    description: str | None = None,
    reversibility: Reversibility = "none",
    postcondition: Postcondition | None = None,
    registry: ToolRegistry | None = None,
) -> F: ...


@overload
def register_tool(
    fn: None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    reversibility: Reversibility = "none",
    postcondition: Postcondition | None = None,
    registry: ToolRegistry | None = None,
) -> Callable[[F], F]: ...


def register_tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    reversibility: Reversibility = "none",
    postcondition: Postcondition | None = None,
    registry: ToolRegistry | None = None,
) -> Any:
    """Register a Python function as a tool; use it bare, with arguments, or as a call.

    ::

        @register_tool(postcondition=lambda args, out: out["sent"])
        def send_email(to: str, subject: str, body: str) -> dict[str, bool]:
            \"\"\"Send an email.\"\"\"

        @register_tool(reversibility="full")
        def word_count(text: str) -> dict[str, int]:
            \"\"\"Count the words in a text.\"\"\"

    Args:
        fn: The function (sync or async). Its signature gives the parameter schema.
        name: The tool's name; default ``module:function``, which spec checks accept as is.
            Another name is found only by workers that imported the module.
        description: For the model; default the docstring's first paragraph.
        reversibility: ``full``, ``partial`` or ``none`` (the default: Armature cannot know
            what a function does, so until you say otherwise it is irreversible: a rule on
            ``_tool_reversibility`` such as ``equals none -> require_approval`` applies, and
            improvement verification runs never call it). Declare ``full`` for a tool with no
            lasting effect.
        postcondition: ``(args, output) -> bool`` checked after each successful call;
            False (or an exception) fails the call with ``postcondition_failed``.
        registry: Where to register; default the process-wide registry.

    Returns:
        ``fn`` unchanged (or a decorator that registers and returns it).

    Raises:
        ToolError: the name is taken, a built-in's, or malformed, or the signature cannot
            become a JSON Schema.
    """
    target = registry or ToolRegistry.default()

    def decorate(f: F) -> F:
        target.add(
            f,
            name=name,
            description=description,
            reversibility=reversibility,
            postcondition=postcondition,
        )
        return f

    return decorate if fn is None else decorate(fn)


def get_tool_spec(name: str, *, registry: ToolRegistry | None = None) -> ToolSpec:
    """The spec of the tool called ``name`` (imports the module of a module:function name).

    Raises:
        ToolError: unknown name (with the known tools and a did-you-mean), or a
            module:function that cannot be loaded.
    """
    return (registry or ToolRegistry.default()).resolve(name).spec


def tool_reversibility(
    name: str,
    args: Mapping[str, Any],
    *,
    registry: ToolRegistry | None = None,
    ctx: ToolContext | None = None,
) -> Reversibility:
    """How far this call can be undone (``http_request``: ``none``, unless ``ctx`` holds the
    spec's mark that its host and method are safe: ``full``).

    Pass it to :func:`armature_temporal.runtime.policy.evaluate_policy`.

    Raises:
        ToolError: as :func:`get_tool_spec`.
    """
    return (registry or ToolRegistry.default()).resolve(name).reversibility(args, ctx)


def policy_args(
    name: str, args: Mapping[str, Any], *, registry: ToolRegistry | None = None
) -> dict[str, Any]:
    """The fields safety rules see for this call: what will run, not only what was written.

    For ``shell`` both ``argv`` (the list that runs) and ``cmd`` (``shlex.join`` of it),
    whichever form the call used; for other tools the args as given. Args that do not
    validate are returned as given (the call then fails with ``invalid_args``). Pass the
    result to :func:`armature_temporal.runtime.policy.evaluate_policy`.

    Raises:
        ToolError: as :func:`get_tool_spec`.
    """
    impl = (registry or ToolRegistry.default()).resolve(name)
    if impl.policy_view is None:
        return dict(args)
    try:
        parsed = impl.args_model.model_validate(dict(args))
    except ValidationError:
        return dict(args)
    return impl.policy_view(parsed)


def resolved_fields(
    name: str, args: Mapping[str, Any], ctx: ToolContext, *, registry: ToolRegistry | None = None
) -> dict[str, str]:
    """The pseudo-fields safety rules see for this call, resolved the way the OS will resolve
    them in ``ctx``: shell's ``_executable``, the file tools' ``_resolved_path``; empty for a
    tool without any, or args that do not validate (the call then fails with ``invalid_args``).
    Blocking (reads symlinks and PATH directories): call it from a thread in async code.

    Pass the result to :func:`armature_temporal.runtime.policy.evaluate_policy` as
    ``resolved``, and the same dict to :func:`call_tool` as ``ctx.checked``, so the tool runs
    exactly what the policy checked.

    Raises:
        ToolError: as :func:`get_tool_spec`.
    """
    impl = (registry or ToolRegistry.default()).resolve(name)
    if impl.resolve_fields is None:
        return {}
    try:
        parsed = impl.args_model.model_validate(dict(args))
    except ValidationError:
        return {}
    return impl.resolve_fields(parsed, ctx)


def tool_pseudo_fields(name: str) -> tuple[str, ...]:
    """The pseudo-fields a rule on tool ``name`` may name: ``_tool_reversibility`` for every
    tool, and what the built-in resolves (``shell``: ``_executable``; ``file_read``,
    ``file_write``, ``file_list``: ``_resolved_path``)."""
    impl = next((t for t in _BUILTINS if t.spec.name == name), None)
    return (REVERSIBILITY_FIELD, *(impl.resolved_names if impl is not None else ()))


def tool_arg_fields(name: str) -> list[str] | None:
    """The argument names of the built-in tool ``name``, from its argument model; None for
    any other name (module:function and registered tools are known only where they load).

    ``tool_arg_fields("shell")`` is ``["argv", "cmd", "timeout_s", "cwd"]``.
    """
    impl = next((t for t in _BUILTINS if t.spec.name == name), None)
    if impl is None:
        return None
    return [info.alias or field for field, info in impl.args_model.model_fields.items()]


def load_tool_modules(modules: Iterable[str], *, registry: ToolRegistry | None = None) -> None:
    """Import each tool module and call its ``register(registry)``, once per registry.

    Blocking (imports): call it from a thread in async code.

    Raises:
        ToolError: a module cannot be imported, has no ``register``, or registering failed.
    """
    target = registry or ToolRegistry.default()
    for module in modules:
        target.load_module(module)


def _import_failure(module_name: str, exc: ImportError) -> str:
    missing = getattr(exc, "name", None) or ""
    if missing == "armature" or missing.startswith("armature."):
        return (
            f"tool module {module_name!r} imports {missing!r}, from the armature-agents 0.7.0 "
            "package; import ToolRegistry, ToolDescriptor, PermissionLevel and Reversibility "
            "from armature_temporal.tools.compat instead (same names, same use), or install "
            "armature-agents in the worker's environment"
        )
    return (
        f"tool module {module_name!r} cannot be imported: {exc}; check the name and that the "
        "module is importable by the worker (on sys.path, or installed)"
    )


_OLDER_MODULES = (
    "armature",
    "armature.registry",
    "armature.registry.registry",
    "armature.permissions",
    "armature.permissions.permissions",
)


def _alias_older_imports() -> None:
    """Let a 0.7.0 tool module run unchanged: where the armature-agents package is not
    installed, its ``armature.registry.registry`` and ``armature.permissions.permissions``
    imports resolve to :mod:`armature_temporal.tools.compat`, which has the same names.
    Where it is installed, nothing is aliased (its own descriptors are accepted too)."""
    import importlib.util
    import sys

    if "armature" in sys.modules:
        return
    try:
        if importlib.util.find_spec("armature") is not None:
            return
    except (ImportError, ValueError):
        return
    from armature_temporal.tools import compat

    for name in _OLDER_MODULES:
        sys.modules.setdefault(name, compat)
