"""The first program of every sandboxed tool call: it builds the sandbox, then becomes the tool.

Run by :func:`armature_temporal.tools.sandbox.run_process` as
``python -I -S _nsinit.py SPEC PROGRAM-ARGV...`` (``SPEC``: a hex ``marshal`` dict that
:func:`armature_temporal.tools._layout.shim_spec` wrote). Standard library only and no
package imports: it runs before, and partly inside, namespaces where the package may be hidden.

Modes (``spec["mode"]``):

- ``root`` (the worker has ``CAP_SYS_ADMIN``) and ``user`` (it has not: a user namespace maps
  the worker's uid to 0 first): ``unshare`` new mount, PID, network, IPC and UTS namespaces,
  then ``fork``; the parent waits and exits as the child did (killed with the call's process
  group, it takes the child with it: ``PR_SET_PDEATHSIG``). The child, PID 1 of the new PID
  namespace and root of its namespaces, makes the program's world (:func:`build`): every
  mount read-only and ``nosuid``, a ``/proc`` of its own (``sys``, ``sysrq-trigger``, ``irq``,
  ``bus``, ``fs`` read-only), a minimal ``/dev``, private ``/tmp``, ``/var/tmp`` and ``/run``,
  empty read-only tmpfs over hidden directories, ``/dev/null`` over hidden files and sockets,
  the workspaces bound back writable, the worker's Python and PATH directories that a private
  directory covers (a virtualenv under ``/tmp``) bound back read-only, ``lo`` up.
  (``mount_setattr`` makes every mount read-only at once; before Linux 5.12, or with
  ``ARMATURE_SANDBOX_NO_SETATTR=1``, which the tests use to take that path, each mount is
  remounted in turn.) Then it enters a child user
  namespace and mount namespace, so every one of those mounts is locked to the program
  (``MNT_LOCKED``: not unmounted, moved or made writable from inside), drops every capability
  (bounding set, effective, permitted, inheritable, ambient; ``SECBIT_NOROOT`` locked) and
  sets ``no_new_privs``.
- ``inner``: the namespaces and mounts were made by ``bwrap``; only checks that no capability
  is left, sets ``no_new_privs``.

Then, in every mode: with network granted, a forwarder on the namespace's own
``127.0.0.1:PROXY_PORT`` to the worker's egress proxy (a unix socket bound in at
``/run/armature-egress.sock``); ``chdir``; ``R`` on the status fd; ``exec`` of the program.
Anything that fails before ``R`` writes ``F<why>`` and exits 126; a failed exec writes
``E<errno>:<why>``.
"""

from __future__ import annotations

import ctypes
import marshal
import os
import sys

#: typing is not imported at run time: it costs several milliseconds of every tool call.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
ST_RELATIME = 4096
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_SECUREBITS = 1, 24, 28
PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 38, 47, 4
#: NOROOT, NO_SETUID_FIXUP, KEEP_CAPS_LOCKED, NO_CAP_AMBIENT_RAISE, each with its lock.
SECUREBITS = 0b11101111
SYS_MOUNT_SETATTR, AT_FDCWD, AT_RECURSIVE = 442, -100, 0x8000
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID = 1, 2
SIOCSIFFLAGS, IFF_UP = 0x8914, 1
CAP_VERSION_3 = 0x20080522
#: What the program's /dev holds, bound from the worker's.
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
#: Parts of /proc a uid-0 program without capabilities could still write: read-only.
PROC_READ_ONLY = ("sys", "sysrq-trigger", "irq", "bus", "fs")
EGRESS_SOCKET = "/run/armature-egress.sock"

libc = ctypes.CDLL(None, use_errno=True)


class Refused(Exception):
    """A step of the sandbox failed: the program must not run."""


def _call(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise Refused(f"cannot {what}: {os.strerror(errno)} (errno {errno})")


def _b(value: str | None) -> bytes | None:
    return None if value is None else os.fsencode(value)


def mount(
    src: str | None, dst: str, fs: str | None, flags: int, data: str | None, what: str
) -> None:
    """mount(2), or :class:`Refused` saying ``what`` failed on ``dst``."""
    result = libc.mount(_b(src), _b(dst), _b(fs), ctypes.c_ulong(flags), _b(data))
    _call(result, f"{what} {dst!r}")


def remount_ro(path: str, keep: int = 0) -> None:
    """Remount the mount at ``path`` read-only and nosuid, with the flags in ``keep``."""
    flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | keep
    mount(None, path, None, flags, None, "make read-only")


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


# --- namespaces ---------------------------------------------------------------------------


def _map_root(uid: int, gid: int) -> None:
    """In a new user namespace: uid and gid 0 are ``uid``/``gid`` of the parent namespace."""
    try:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"0 {uid} 1")
        _write("/proc/self/gid_map", f"0 {gid} 1")
    except OSError as exc:
        raise Refused(f"cannot map uid 0 in the new user namespace: {exc.strerror}") from None


def _relay(pid: int) -> None:
    """The parent: wait for the namespace's first process and exit as it did."""
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        import signal

        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


def enter(mode: str, status: int) -> None:
    """New namespaces (and a user namespace mapping this uid to 0 in ``user`` mode), then
    fork: the child (PID 1) returns, the parent relays its exit and never returns."""
    uid, gid = os.geteuid(), os.getegid()
    flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
    _call(
        libc.unshare(flags | (CLONE_NEWUSER if mode == "user" else 0)),
        "create mount, PID and network namespaces"
        + (" in a user namespace" if mode == "user" else ""),
    )
    if mode == "user":
        _map_root(uid, gid)
    pid = os.fork()
    if pid == 0:
        _call(libc.prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0), "set the parent-death signal")
        return
    os.close(status)
    _relay(pid)


def lock_and_drop() -> None:
    """Enter a child user and mount namespace (every mount becomes locked), then give up every
    capability for good and set ``no_new_privs``."""
    _call(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS), "enter a child user namespace")
    _map_root(0, 0)
    _call(libc.prctl(PR_SET_SECUREBITS, SECUREBITS, 0, 0, 0), "lock the securebits")
    with open("/proc/sys/kernel/cap_last_cap") as last:
        for cap in range(int(last.read()) + 1):
            _call(libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), f"drop capability {cap}")
    _call(libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient caps")

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    zero = (ctypes.c_uint32 * 6)()
    _call(libc.capset(ctypes.byref(Header(CAP_VERSION_3, 0)), zero), "clear the capabilities")
    no_new_privs()


def no_new_privs() -> None:
    _call(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "set no_new_privs")


def check_no_capabilities() -> None:
    """``inner`` mode: bwrap dropped them; refuse to run if any is left."""
    with open("/proc/self/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name in ("CapEff", "CapPrm", "CapBnd", "CapAmb") and int(value, 16) != 0:
                raise Refused(f"the program would keep capabilities ({name} {value.strip()})")


# --- the program's world ------------------------------------------------------------------


def _read_only_everything(fallback: bool) -> None:
    """Every mount under / read-only and nosuid (``mount_setattr``, Linux 5.12+; else one
    remount per mount point, keeping the flags a user namespace locks)."""
    if not fallback:

        class Attr(ctypes.Structure):
            _fields_ = [(n, ctypes.c_uint64) for n in ("set", "clr", "prop", "userns")]

        attr = Attr(MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID, 0, 0, 0)
        size = ctypes.c_size_t(ctypes.sizeof(attr))
        args = (ctypes.c_int(AT_FDCWD), b"/", ctypes.c_uint(AT_RECURSIVE), ctypes.byref(attr))
        if libc.syscall(SYS_MOUNT_SETATTR, *args, size) == 0:
            return
        if ctypes.get_errno() != 38:  # ENOSYS: an older kernel
            _call(-1, "make every mount read-only")
    with open("/proc/self/mountinfo") as info:
        points = [line.split()[4] for line in info]
    for point in points:
        path = point.encode().decode("unicode_escape")  # \040 and the like
        try:
            kept = os.statvfs(path).f_flag
        except OSError:
            continue  # covered by a later mount, or gone: what is on top is handled
        flags = kept & (MS_NODEV | MS_NOEXEC | MS_NOATIME | MS_NODIRATIME)
        flags |= MS_RELATIME if kept & ST_RELATIME else 0
        remount_ro(path, flags)


def _proc() -> None:
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None, "mount a /proc on")
    for name in PROC_READ_ONLY:
        path = "/proc/" + name
        if os.path.exists(path):
            mount(path, path, None, MS_BIND | MS_REC, None, "bind")
            remount_ro(path, MS_NODEV | MS_NOEXEC)


def _dev(devices: dict[str, int]) -> None:
    mount("tmpfs", "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k", "mount a /dev on")
    for name, fd in devices.items():
        os.close(os.open("/dev/" + name, os.O_CREAT | os.O_WRONLY, 0o666))
        mount(f"/proc/self/fd/{fd}", "/dev/" + name, None, MS_BIND, None, "bind the device")
        os.close(fd)
    os.mkdir("/dev/pts", 0o755)
    try:  # ptys are a convenience: without a devpts of its own the program has none
        mount(
            "devpts",
            "/dev/pts",
            "devpts",
            MS_NOSUID | MS_NOEXEC,
            "newinstance,ptmxmode=0666,mode=0620",
            "mount",
        )
        os.symlink("pts/ptmx", "/dev/ptmx")
    except Refused:
        pass
    os.mkdir("/dev/shm", 0o1777)
    mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777", "mount a tmpfs on")
    for name, target in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ):
        os.symlink(target, "/dev/" + name)
    remount_ro("/dev", MS_NOEXEC)


def _bind_file(fd: int, path: str, read_only: bool) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if not os.path.exists(path):
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    mount(f"/proc/self/fd/{fd}", path, None, MS_BIND, None, "bind")
    if read_only:
        remount_ro(path, MS_NODEV)


def _lo_up() -> None:
    """Bring up the network namespace's own loopback (ioctl SIOCSIFFLAGS on ``lo``)."""
    fd = libc.socket(2, 2, 0)  # AF_INET, SOCK_DGRAM
    if fd < 0:
        _call(-1, "open a socket to bring up lo")
    try:
        ifreq = ctypes.create_string_buffer(b"lo", 40)
        ctypes.c_short.from_buffer(ifreq, 16).value = IFF_UP
        _call(0 if libc.ioctl(fd, SIOCSIFFLAGS, ifreq) == 0 else -1, "bring up lo")
    finally:
        os.close(fd)


def build(spec: dict[str, Any]) -> None:
    """The program's world (the module docstring), as the namespaces' root."""
    mount(None, "/", None, MS_REC | MS_PRIVATE, None, "make private the mounts under")
    opened: list[tuple[str, int, bool]] = []  # path, O_PATH fd, read-only
    for path in spec["rebind"]:
        opened.append((path, os.open(path, os.O_PATH | os.O_DIRECTORY), False))
    for path in spec["readable"]:
        opened.append((path, os.open(path, os.O_PATH), True))
    runtime = [(p, os.open(p, os.O_PATH | os.O_DIRECTORY)) for p in spec.get("runtime", ())]
    devices = {n: os.open("/dev/" + n, os.O_PATH) for n in DEVICES if os.path.exists("/dev/" + n)}
    null = os.open("/dev/null", os.O_PATH)
    egress = os.open(spec["egress"], os.O_PATH) if spec["egress"] else None
    _read_only_everything(spec["fallback"])
    _proc()
    _dev(devices)
    for path, mode in spec["private"]:
        mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, f"mode={mode}", "mount a tmpfs on")
    for path in spec["hide"]:
        mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m", "hide")
    for path in spec["mask"]:
        mount(f"/proc/self/fd/{null}", path, None, MS_BIND, None, "hide (/dev/null over)")
    for path, fd, only_read in opened:
        if only_read:
            _bind_file(fd, path, True)
        else:
            os.makedirs(path, exist_ok=True)
            mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC, None, "bind back")
            flags = MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV
            mount(None, path, None, flags, None, "make writable")
        os.close(fd)
    for path, fd in runtime:  # the worker's Python and PATH under a private dir: read-only
        os.makedirs(path, exist_ok=True)
        mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC, None, "bind back")
        remount_ro(path, MS_NODEV)
        os.close(fd)
    for path in spec["hide"]:
        remount_ro(path, MS_NODEV)
    if egress is not None:
        _bind_file(egress, EGRESS_SOCKET, False)
        os.close(egress)
    os.close(null)
    _lo_up()


# --- granted network: the forwarder ---------------------------------------------------------


def forward(port: int, status: int) -> None:
    """With network granted: listen on this namespace's 127.0.0.1:``port`` and pass each
    connection to the worker's egress proxy (the unix socket at :data:`EGRESS_SOCKET`), in a
    child process that dies with the namespace."""
    import _socket  # not socket: its imports would delay the program by milliseconds

    bound = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    bound.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
    bound.bind(("127.0.0.1", port))
    bound.listen(64)
    if os.fork() != 0:
        bound.close()
        return
    import contextlib  # the forwarder, beside the program: these take their time here
    import socket
    import threading

    listener = socket.socket(fileno=bound.detach())
    os.close(status)  # only the program's first process reports
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)

    def pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
                with contextlib.suppress(OSError):
                    sock.shutdown(how)

    def serve(client: socket.socket) -> None:
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(EGRESS_SOCKET)
        except OSError:
            client.close()
            upstream.close()
            return
        back = threading.Thread(target=pump, args=(upstream, client), daemon=True)
        back.start()
        pump(client, upstream)
        back.join()
        client.close()
        upstream.close()

    while True:
        client, _ = listener.accept()
        threading.Thread(target=serve, args=(client,), daemon=True).start()


# --- main -----------------------------------------------------------------------------------


def main() -> None:
    spec: dict[str, Any] = marshal.loads(bytes.fromhex(sys.argv[1]))
    status: int = spec["status"]
    os.set_inheritable(status, False)
    try:
        if spec.get("parent"):  # die with the worker that started it (an MCP server)
            _call(libc.prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0), "set the parent-death signal")
            if os.getppid() != spec["parent"]:  # it died before the signal was set
                os._exit(125)
        if spec["mode"] == "inner":
            if os.readlink("/proc/self/ns/mnt") == spec["host_mnt"]:
                raise Refused("it has no mount namespace of its own")
            check_no_capabilities()
            no_new_privs()
        else:
            enter(spec["mode"], status)
            build(spec)
            lock_and_drop()
        if spec["proxy_port"]:
            forward(spec["proxy_port"], status)
        os.chdir(spec["cwd"])
    except Refused as exc:
        os.write(status, b"F" + str(exc).encode(errors="replace"))
        os._exit(126)
    except OSError as exc:
        why = f"{exc.filename}: {exc.strerror}" if exc.filename else str(exc)
        os.write(status, b"F" + why.encode(errors="replace"))
        os._exit(126)
    env = dict(os.environ)
    if spec["lc_ctype"] is None:
        env.pop("LC_CTYPE", None)  # the interpreter's locale coercion must not reach the program
    else:
        env["LC_CTYPE"] = spec["lc_ctype"]
    os.write(status, b"R")
    try:
        os.execvpe(spec["program"], sys.argv[2:], env)
    except OSError as exc:
        os.write(status, f"E{exc.errno}:{exc.strerror}".encode(errors="replace"))
        os._exit(127)


if __name__ == "__main__":
    main()
