"""What a sandbox is (:class:`Sandbox`), what it was probed to guarantee (:class:`Guarantee`),
and the errors of running a program in one. Re-exported by
:mod:`armature_temporal.tools.sandbox`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from armature_temporal.errors import ArmatureError

__all__ = ["MODES", "Guarantee", "Sandbox", "SandboxFailed", "SandboxKind", "SandboxUnavailable"]

SandboxKind = Literal["bwrap", "unshare", "unshare-user", "process-group", "unavailable"]
#: How :mod:`~armature_temporal.tools._nsinit` builds each kind (``inner``: bwrap built it).
MODES = {"unshare": "root", "unshare-user": "user", "bwrap": "inner"}


class SandboxUnavailable(ArmatureError):
    """``$ARMATURE_SANDBOX`` names a sandbox that cannot run here."""


class SandboxFailed(ArmatureError, OSError):
    """The sandbox could not set up a call: the program did not run."""


@dataclass(frozen=True)
class Guarantee:
    """One property of the sandbox, as probed here: ``holds``, and what was seen."""

    name: str
    holds: bool
    detail: str


@dataclass(frozen=True)
class Sandbox:
    """How tool programs are isolated in this process.

    Attributes:
        kind: ``unshare`` (namespaces made with the worker's ``CAP_SYS_ADMIN``),
            ``unshare-user`` (in an unprivileged user namespace), ``bwrap``, ``process-group``
            (none: ``ARMATURE_SANDBOX=none``), ``unavailable`` (no sandbox works here and none
            was waived: programs do not run).
        prefix: bwrap's path and options (empty for the others).
        note: What was found: why this one, or what failed, for ``armature doctor``.
        guarantees: What the probe saw (empty where none was run).
    """

    kind: SandboxKind
    prefix: tuple[str, ...] = ()
    note: str = ""
    guarantees: tuple[Guarantee, ...] = ()

    @property
    def isolated(self) -> bool:
        """Whether programs run in the namespaces (and so with every guarantee)."""
        return self.kind in MODES

    @property
    def hides(self) -> bool:
        """Whether programs cannot see :func:`hidden_paths` (``$ARMATURE_HOME`` and the rest)."""
        return self.isolated
