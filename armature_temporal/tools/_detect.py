"""Which sandbox works here, and what it guarantees: each candidate is probed by running a real
program through :func:`armature_temporal.tools.sandbox.run_process` that tries to undo it.

The guarantees (:data:`GUARANTEES`), each checked from inside:

- ``pid_namespace``: the program is PID 1 (2 under bwrap) of its own PID namespace and its
  ``/proc`` shows a handful of processes;
- ``no_capabilities``: ``CapEff``, ``CapPrm``, ``CapBnd`` and ``CapAmb`` are 0 and
  ``NoNewPrivs`` is 1;
- ``locked_mounts``: a file the sandbox hides stays hidden after ``umount2`` on its cover, on
  ``/proc`` and ``/dev``, and after entering a new user and mount namespace (``unshare -rm``)
  and trying again;
- ``private_dirs``: no block device in ``/dev``, the worker's ``/tmp`` files and ``/run``
  sockets are not there, and the workspace is writable;
- ``network_namespace``: only ``lo`` in ``/proc/net/dev``, and a listener on the worker's
  127.0.0.1 cannot be reached;
- ``egress_proxy`` (for granted calls): the proxy variables name the forwarder, which answers,
  and the proxy refuses a tunnel to the worker's loopback.

The first candidate (``unshare`` where the worker has ``CAP_SYS_ADMIN``, then ``unshare-user``,
then ``bwrap``) whose core guarantees all hold is used; none: ``unavailable`` (programs do not
run; ``ARMATURE_SANDBOX=none`` waives the sandbox on purpose).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Literal

from armature_temporal.tools._hiding import Layout, layout
from armature_temporal.tools.sandbox import (
    Guarantee,
    Sandbox,
    SandboxFailed,
    SandboxUnavailable,
    run_process,
)

__all__ = [
    "CORE",
    "GUARANTEES",
    "SandboxChoice",
    "candidates",
    "choice",
    "detect",
    "probe",
    "working",
]

log = logging.getLogger(__name__)

#: ``$ARMATURE_SANDBOX`` values.
SandboxChoice = Literal["auto", "bwrap", "unshare", "none"]
_CHOICES: tuple[SandboxChoice, ...] = ("auto", "bwrap", "unshare", "none")
_PROBE_TIMEOUT_S = 20.0

#: Each guarantee's name and what it means, as doctor prints it.
GUARANTEES: dict[str, str] = {
    "pid_namespace": "own PID namespace and /proc",
    "no_capabilities": "no capabilities (empty bounding set, no_new_privs)",
    "locked_mounts": "hiding mounts locked (umount, unshare -rm + umount fail)",
    "private_dirs": "private /dev, /tmp, /run (no block devices, no worker sockets)",
    "network_namespace": "own network namespace (only its own lo; worker's loopback unreachable)",
    "egress_proxy": "egress proxy for granted calls (loopback refused)",
}
#: What every call needs; ``egress_proxy`` is needed only by calls granted network.
CORE = tuple(g for g in GUARANTEES if g != "egress_proxy")

#: Runs inside the sandbox: argv[1] the marker in the worker's /tmp, argv[2] the worker's
#: loopback port, argv[3] "egress" to check the proxy. Prints ``name=1`` or ``name=0 why``.
_PROBE = r"""
import ctypes, os, socket, sys
marker, port, egress = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "egress"
libc = ctypes.CDLL(None, use_errno=True)
def say(name, ok, why=""):
    print("%s=%d %s" % (name, 1 if ok else 0, why), flush=True)
pids = [p for p in os.listdir("/proc") if p.isdigit()]
say("pid_namespace", os.getpid() <= 2 and len(pids) <= 4,
    "pid %d, %d processes" % (os.getpid(), len(pids)))
status = dict(l.split(":", 1) for l in open("/proc/self/status") if ":" in l)
caps = {k: status[k].strip() for k in ("CapEff", "CapPrm", "CapBnd", "CapAmb", "NoNewPrivs")}
say("no_capabilities", all(int(caps[k], 16) == 0 for k in caps if k != "NoNewPrivs")
    and caps["NoNewPrivs"] == "1", " ".join("%s %s" % kv for kv in caps.items()))
undone = []
for target in ("/tmp", "/proc", "/dev", "/run"):
    if libc.umount2(target.encode(), 2) == 0:
        undone.append("umount " + target)
if libc.unshare(0x10000000 | 0x00020000) == 0:
    for target in ("/tmp", "/proc", "/dev", "/run"):
        if libc.umount2(target.encode(), 2) == 0:
            undone.append("unshare -rm; umount " + target)
say("locked_mounts", not undone and not os.path.exists(marker), ", ".join(undone) or
    ("the hidden marker is visible" if os.path.exists(marker) else "umount refused"))
import stat
blocks = [d for d in os.listdir("/dev") if stat.S_ISBLK(os.lstat("/dev/" + d).st_mode)]
open("written", "w").write("ok")
say("private_dirs", not blocks and not os.path.exists(marker), "block devices: %s" % blocks)
devs = [l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:]]
reached = False
try:
    socket.create_connection(("127.0.0.1", port), timeout=2).close()
    reached = True
except OSError:
    pass
say("network_namespace", devs == ["lo"] and not reached,
    "interfaces %s%s" % (devs, ", reached the worker's loopback" if reached else ""))
if egress:
    proxy = os.environ.get("HTTPS_PROXY", "")
    try:
        s = socket.create_connection(("127.0.0.1", int(proxy.rsplit(":", 1)[1])), timeout=5)
        s.sendall(b"CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: x\r\n\r\n" % port)
        answer = s.recv(200).decode(errors="replace")
        s.close()
        say("egress_proxy", answer.startswith("HTTP/1.1 403"),
            answer.splitlines()[0] if answer else "no answer")
    except (OSError, IndexError, ValueError) as e:
        say("egress_proxy", False, "proxy %r: %s" % (proxy, e))
"""


def choice() -> SandboxChoice:
    """``$ARMATURE_SANDBOX``, checked."""
    raw = (os.environ.get("ARMATURE_SANDBOX") or "auto").strip().lower()
    for known in _CHOICES:
        if raw == known:
            return known
    raise SandboxUnavailable(
        f"ARMATURE_SANDBOX={raw!r} is not one of {list(_CHOICES)}; unset it (auto: the best "
        "that works here) or pick one"
    )


def _has_sys_admin() -> bool:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> 21 & 1)
    except OSError:
        pass
    return False


def _bwrap_prefix(bwrap: str) -> tuple[str, ...]:
    """bwrap's options: every namespace, no capabilities, no further user namespaces (a
    nested one that locks the mounts, where bwrap knows ``--disable-userns``), the whole
    file system read-only, its own /proc and /dev."""
    try:
        usage = subprocess.run(
            [bwrap, "--help"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        usage = ""
    lock = ("--disable-userns",) if "--disable-userns" in usage else ()
    return (
        bwrap,
        "--die-with-parent",
        "--unshare-all",
        "--unshare-user",
        *lock,
        "--cap-drop",
        "ALL",
        "--ro-bind",
        "/",
        "/",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
    )


def candidates(wanted: SandboxChoice = "auto") -> list[Sandbox]:
    """The sandboxes to try, best first (only those ``wanted`` names)."""
    found: list[Sandbox] = []
    if not sys.platform.startswith("linux"):
        return found  # namespaces are Linux's
    if wanted in ("auto", "unshare"):
        if _has_sys_admin():
            found.append(Sandbox("unshare", note="namespaces made with CAP_SYS_ADMIN"))
        found.append(Sandbox("unshare-user", note="namespaces in an unprivileged user namespace"))
    if wanted in ("auto", "bwrap") and (bwrap := shutil.which("bwrap")):
        found.append(Sandbox("bwrap", _bwrap_prefix(bwrap), "bubblewrap"))
    return found


def _run(box: Sandbox, egress: bool) -> dict[str, Guarantee]:
    """Run the probe to completion from any thread, in an event loop of its own."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(_probe_once(box, egress))).result()


async def _probe_once(box: Sandbox, egress: bool) -> dict[str, Guarantee]:
    with tempfile.TemporaryDirectory(prefix="armature-probe-", dir="/tmp") as tmp:
        root = Path(tmp)
        marker = root / "marker"
        marker.write_text("the worker's /tmp")
        workspace = root / "ws"
        workspace.mkdir()
        plain = layout((workspace,))
        mounts = Layout(plain.private, (), plain.mask, plain.rebind, (), plain.runtime)
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(1)
            port = listener.getsockname()[1]
            done = await run_process(
                [
                    sys.executable,
                    "-I",
                    "-S",
                    "-c",
                    _PROBE,
                    str(marker),
                    str(port),
                    "egress" if egress else "-",
                ],
                cwd=workspace,
                env={"PATH": os.environ.get("PATH", os.defpath)},
                timeout_s=_PROBE_TIMEOUT_S,
                cap=20_000,
                box=box,
                network=egress,
                mounts=mounts,
            )
        written = (workspace / "written").exists()
    seen: dict[str, Guarantee] = {}
    for line in done.stdout.splitlines():
        name, _, rest = line.partition("=")
        flag, _, detail = rest.partition(" ")
        holds = flag == "1" and (name != "private_dirs" or written)
        if name == "private_dirs" and not written:
            detail += "; the workspace was not writable"
        seen[name] = Guarantee(name, holds, detail.strip())
    if not seen:
        why = (done.stderr.strip().splitlines() or [f"exit {done.exit_code}"])[-1]
        raise SandboxFailed(1, f"the probe printed nothing: {why}")
    return seen


def probe(box: Sandbox) -> tuple[Guarantee, ...]:
    """What ``box`` guarantees here, each guarantee probed from inside (in this order)."""
    names = list(GUARANTEES)
    try:
        seen = _run(box, False)
        if all(seen.get(g) is not None and seen[g].holds for g in CORE):
            try:
                seen |= _run(box, True)
            except (OSError, SandboxFailed) as exc:
                seen["egress_proxy"] = Guarantee("egress_proxy", False, str(exc))
    except (OSError, SandboxFailed) as exc:
        why = str(exc)
        return tuple(Guarantee(n, False, why) for n in names)
    return tuple(seen.get(n) or Guarantee(n, False, "not checked") for n in names)


@functools.cache
def detect(wanted: SandboxChoice) -> Sandbox:
    """The sandbox to use for ``wanted`` (cached per process).

    Raises:
        SandboxUnavailable: ``wanted`` names one that does not give the guarantees here.
    """
    if wanted == "none":
        return Sandbox("process-group", note="ARMATURE_SANDBOX=none: no sandbox, on purpose")
    failures = []
    best: Sandbox | None = None
    for box in candidates(wanted):
        guarantees = probe(box)
        failing = [g for g in guarantees if g.name in CORE and not g.holds]
        probed = Sandbox(box.kind, box.prefix, box.note, guarantees)
        if not failing:
            return probed
        best = best or probed
        failures.append(f"{box.kind}: " + "; ".join(f"{g.name}: {g.detail}" for g in failing))
    tried = " | ".join(failures) or (
        f"{sys.platform} has no Linux namespaces"
        if not sys.platform.startswith("linux")
        else "bwrap is not installed"
    )
    if wanted != "auto":
        raise SandboxUnavailable(
            f"ARMATURE_SANDBOX={wanted} but it does not give tool programs their guarantees "
            f"here ({tried}); fix what it names, set ARMATURE_SANDBOX=auto, or "
            "ARMATURE_SANDBOX=none to run them unsandboxed"
        )
    log.warning("tool programs will not run: no sandbox works here (%s)", tried)
    return Sandbox(
        "unavailable",
        note=f"no sandbox works here ({tried})",
        guarantees=best.guarantees if best else (),
    )


def working(wanted: SandboxChoice = "auto") -> list[Sandbox]:
    """Every candidate that gives the core guarantees here, probed (not only the one
    :func:`detect` picks)."""
    found = []
    for box in candidates(wanted):
        guarantees = probe(box)
        if all(g.holds for g in guarantees if g.name in CORE):
            found.append(Sandbox(box.kind, box.prefix, box.note, guarantees))
    return found
