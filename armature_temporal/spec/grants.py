"""What ``armature validate`` says about the network a spec's tool programs need.

Tool programs run with no network unless the spec grants it (``sandbox: {allow_network: true}``,
or ``network: true`` on a stage), and never reach the worker's loopback. A ``shell`` tool stage
or a script adapter that clearly needs the network (a program such as ``curl``, ``git clone``,
``pip install``, ``ssh``; a URL in its arguments) without a grant gets a warning naming the
grant to add; one that names ``localhost``/``127.0.0.1``/``::1`` gets a warning that loopback is
never reachable from a tool program, and what to use instead (``http_request`` with
``http_allow_hosts``). A granted program that does not speak through an HTTP proxy (``ssh``,
``nc``, ``ping``, ``dig`` ...) is warned too: a grant carries HTTP(S) through the egress proxy.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator

from armature_temporal.spec.models import Spec, Stage
from armature_temporal.spec.references import Path, Problem

__all__ = ["grant_warnings"]

#: Programs that talk to the network whatever their arguments.
NETWORK_PROGRAMS = frozenset(
    {
        "curl", "wget", "aria2c", "http", "https", "xh", "httpie", "gh", "aws", "gcloud",
        "az", "kubectl", "helm", "ssh", "scp", "sftp", "nc", "ncat", "netcat", "telnet",
        "ftp", "dig", "nslookup", "host", "ping", "ping6", "traceroute", "socat",
    }
)  # fmt: skip
#: Programs that need the network for some subcommands: program -> those subcommands.
NETWORK_SUBCOMMANDS: dict[str, frozenset[str]] = {
    "git": frozenset({"clone", "fetch", "pull", "push", "ls-remote", "submodule", "remote"}),
    "pip": frozenset({"install", "download", "index", "search"}),
    "pip3": frozenset({"install", "download", "index", "search"}),
    "uv": frozenset({"pip", "add", "sync", "lock", "run", "tool"}),
    "poetry": frozenset({"install", "add", "update", "lock"}),
    "npm": frozenset({"install", "i", "ci", "add", "update", "view", "publish"}),
    "npx": frozenset({"-y", "--yes"}),
    "yarn": frozenset({"install", "add", "upgrade"}),
    "pnpm": frozenset({"install", "i", "add", "update"}),
    "cargo": frozenset({"install", "fetch", "update", "add", "publish"}),
    "go": frozenset({"get", "install", "mod"}),
    "apt": frozenset({"install", "update", "upgrade"}),
    "apt-get": frozenset({"install", "update", "upgrade"}),
    "docker": frozenset({"pull", "push", "login"}),
    "rsync": frozenset(),  # needs network when an argument is host:path (below)
}
#: Programs that do not go through an HTTP proxy: a grant does not carry them.
RAW_PROGRAMS = frozenset(
    {"ssh", "scp", "sftp", "nc", "ncat", "netcat", "telnet", "ftp", "dig", "nslookup", "host",
     "ping", "ping6", "traceroute", "socat"}
)  # fmt: skip
_URL = re.compile(r"\b(?:https?|ftp|git|ssh|wss?)://[^\s'\"]+", re.IGNORECASE)
_REMOTE = re.compile(r"^[\w.-]+@[\w.-]+:")  # git@github.com:org/repo, user@host:path
_LOOPBACK = re.compile(r"\b(?:localhost|127(?:\.\d{1,3}){3}|0\.0\.0\.0)\b|\[?::1\]?(?![\w:])", re.I)


def _words(command: str | list[str]) -> list[str]:
    if isinstance(command, list):
        return [str(part) for part in command]
    try:
        return shlex.split(command)
    except ValueError:
        return command.split()


def _programs(spec: Spec, index: int, stage: Stage) -> Iterator[tuple[Path, list[str]]]:
    """The argv (as written, templates and all) of each program the stage runs."""
    if stage.tool is not None and stage.tool.name == "shell":
        args = stage.tool.args
        command = args.get("argv", args.get("cmd"))
        if isinstance(command, (str, list)):
            key = "argv" if "argv" in args else "cmd"
            yield ("stages", index, "tool", "args", key), _words(command)
    if stage.adapter is not None and stage.adapter in spec.adapters:
        adapter = spec.adapters[stage.adapter]
        if adapter.type == "script" and adapter.cmd:
            words = _words(adapter.cmd)
            if adapter.shell:  # one shell command line: every word of it
                words = [w for part in words for w in _words(part)]
            yield ("adapters", stage.adapter, "cmd"), words


def _needs_network(words: list[str]) -> str | None:
    """What in ``words`` needs the network, or None."""
    names = [w.rsplit("/", 1)[-1] for w in words]
    for k, name in enumerate(names):
        if name in NETWORK_PROGRAMS:
            return f"{name!r}"
        wanted = NETWORK_SUBCOMMANDS.get(name)
        if wanted and wanted & set(words[k + 1 : k + 4]):
            sub = next(w for w in words[k + 1 : k + 4] if w in wanted)
            return f"{name!r} {sub!r}"
    for word in words:
        if url := _URL.search(word):
            return f"the address {url.group(0)!r}"
        if _REMOTE.match(word):
            return f"the remote {word!r}"
    return None


def grant_warnings(spec: Spec) -> list[Problem]:
    """Stages whose tool programs need a network grant they lack, name loopback, or need more
    than a grant gives; ``network:`` on a stage that runs no program."""
    allow = spec.sandbox is not None and spec.sandbox.allow_network
    found: list[Problem] = []
    for i, stage in enumerate(spec.stages):
        granted = stage.network if stage.network is not None else allow
        runs = list(_programs(spec, i, stage))
        shell_agent = stage.role is not None and "shell" in stage.role.tools
        if stage.network and not runs and not shell_agent:
            found.append(
                (
                    ("stages", i, "network"),
                    "network: true grants network to the programs a stage runs (a shell tool "
                    "stage, a script adapter, an agent with the shell tool), and this stage "
                    "runs none, so it does nothing",
                )
            )
        for path, words in runs:
            text = " ".join(words)
            if loop := _LOOPBACK.search(text):
                found.append(
                    (
                        path,
                        f"{loop.group(0)!r} is never reachable from a tool program: each runs "
                        "in its own network namespace, whose loopback is its own, and no grant "
                        "reaches the worker's machine or its services; to call an HTTP "
                        "service use the http_request tool with the host in http_allow_hosts",
                    )
                )
                continue
            need = _needs_network(words)
            if need is None:
                continue
            first = words[0].rsplit("/", 1)[-1] if words else ""
            if not granted:
                found.append(
                    (
                        path,
                        f"{need} needs the network, but tool programs have none unless the "
                        f"spec grants it: add `network: true` to stage {stage.id!r} (or `sandbox: "
                        "{allow_network: true}` for every stage); it then reaches the outside "
                        "through the egress proxy (HTTP and HTTPS), never loopback or the "
                        "worker's services",
                    )
                )
            elif first in RAW_PROGRAMS:
                found.append(
                    (
                        path,
                        f"{first!r} does not go through an HTTP proxy, and a network grant "
                        "gives tool programs HTTP(S) through the egress proxy only (no raw "
                        "TCP, UDP or DNS of their own); use an HTTP(S) client, or the "
                        "http_request tool",
                    )
                )
    return list(dict.fromkeys(found))
