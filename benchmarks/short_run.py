"""Short run from a shell: ``armature submit SPEC --wait`` on a warm stack, against 0.7.0.

Issue #27, deliverable 2: a 5-stage run in ≤ 0.7 s from a shell, warm stack, instant endpoint.
Every figure is a CLI process that this script spawns, as a person at a shell would:

* **endpoint** — ``fake_openai_server``: OpenAI-compatible ``POST /v1/chat/completions`` on a
  free loopback port, in a thread here, answering at once; it counts the calls (5 per run: no
  cache). **spec** — ``SPEC_TEMPLATE``: five worker stages in a chain, text outputs, one tier
  ``{provider: openai, model: gpt-4o-mini, api_base: <fake>/v1, api_key_env: FAKE_OPENAI_KEY}``,
  in a temporary directory; the same file loads in both engines.
* **armature** — this checkout's CLI, a throwaway ``ARMATURE_HOME``, free ``ARMATURE_DEV_PORT``
  and ``ARMATURE_UI_PORT``; an untimed first ``submit --wait`` starts the stack (dev server,
  background worker), ``armature dev stop`` ends it.
* **baseline** — armature-agents 0.7.0's CLI from a virtualenv outside the repository
  (``--old-venv``, made with pip when missing; never imported here): ``armature run SPEC
  --force --no-cache`` (no checkpoint or cache reuse), ``HOME`` a throwaway directory (it
  writes ``~/.armature``), an untimed first run. Issue #27 quotes 4.09 s per run for it.

Then ``--runs`` timed runs of each command (the run, ``--help``, ``validate SPEC``), the engines
taking turns run by run so that drifting load hits both. Per command: wall time from spawn to
exit (median, p90) and peak RSS (``wait4``: the CLI and the children it waited for, not the
worker); for ``submit --wait`` also when it printed "started run" (imports, compile, connect,
start). Both run from bytecode (a pycache under the temporary directory, written by the
untimed first run), as after a pip install. Ratio: ours over 0.7.0's medians. Targets: a run
≤ 0.7 s; ``--help``, ``validate`` ≤ 0.2 s. Both get ``LITELLM_LOCAL_MODEL_COST_MAP=True``.
Without the baseline (``--skip-baseline``, or 0.7.0 cannot be installed or run) it says why and
prints ours; a failure of ours exits 1.

``python benchmarks/short_run.py [--runs N] [--skip-baseline] [--old-venv DIR] [--json]``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _local import QuietJSONHandler, free_port, serving

ROOT = Path(__file__).resolve().parents[1]
TARGET_RUN_S = 0.7
TARGET_CLI_S = 0.2
QUOTED_OLD_S = 4.09
OLD_PACKAGE = "armature-agents==0.7.0"
STAGES = 5
RUN_TIMEOUT_S = 120

SPEC_TEMPLATE = """\
name: short-run
version: "1"
description: Five worker stages in a chain, text outputs, on an instant endpoint.
model_tiers:
  small: {{provider: openai, model: gpt-4o-mini, api_base: "{base}", api_key_env: FAKE_OPENAI_KEY}}
stages:
  - {{id: s1, role: {{name: S1, type: worker, description: "Open a topic.", model_tier: small}}}}
"""
STAGE_LINE = (
    '  - {{id: s{i}, depends_on: [s{p}], role: {{name: S{i}, type: worker, description: "Extend '
    'the previous answer.", model_tier: small}}}}\n'
)
FAKE_REPLY = (
    '{{"id": "chatcmpl-fake-{n}", "object": "chat.completion", "created": {t}, "model": {m}, '
    '"choices": [{{"index": 0, "finish_reason": "stop", "message": {{"role": "assistant", '
    '"content": "A fake, instant answer."}}}}], '
    '"usage": {{"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25}}}}'
)


class fake_server(ThreadingHTTPServer):
    daemon_threads = True
    fake_calls = 0


class fake_handler(QuietJSONHandler):
    server: fake_server

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        if not self.path.endswith("/chat/completions"):
            self.send_error(404)
            return
        self.server.fake_calls += 1
        model = json.dumps(request.get("model", "gpt-4o-mini"))
        reply = FAKE_REPLY.format(n=self.server.fake_calls, t=int(time.time()), m=model)
        self.send_json(reply.encode())


def fake_openai_server() -> contextlib.AbstractContextManager[fake_server]:
    """The fake endpoint on a free loopback port, served from a thread until the block ends."""
    return serving(fake_server(("127.0.0.1", 0), fake_handler))


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def timed(argv: list[str], side: dict[str, Any]) -> dict[str, Any]:
    """Run ``argv`` to its end: wall seconds, peak RSS (MiB, from wait4), exit code, and the
    stderr lines with the second each arrived. RuntimeError when it fails or hangs."""
    lines: list[tuple[float, str]] = []
    with tempfile.TemporaryFile() as out:
        start = time.perf_counter()
        env, cwd = side["env"], side["cwd"]
        proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=out, stderr=subprocess.PIPE)

        def read() -> None:
            for raw in proc.stderr or ():
                lines.append((time.perf_counter() - start, raw.decode(errors="replace")))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        killer = threading.Timer(RUN_TIMEOUT_S, proc.kill)
        killer.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        killer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        reader.join(10)
        out.seek(0)
        tail = "".join(text for _, text in lines[-5:]) or out.read()[-500:].decode(errors="replace")
    if proc.returncode != 0:
        raise RuntimeError(f"{side['name']}: {' '.join(argv)} exited {proc.returncode}: {tail}")
    return {"s": wall, "rss_mib": usage.ru_maxrss / 1024, "lines": lines}


def alternate(sides: list[dict[str, Any]], runs: int, fake: fake_server) -> str | None:
    """``runs`` timed runs of each command, the sides taking turns. A failure of ours stops
    the benchmark; one of the baseline drops it, and the reason is returned."""
    dropped = None
    for cmd in ("run", "help", "validate"):
        got: dict[str, list[list[float]]] = {side["name"]: [[], [], [], [0]] for side in sides}
        for _ in range(runs):
            for side in list(sides):
                before, figures = fake.fake_calls, got[side["name"]]
                try:
                    one = timed(side[cmd], side)
                except RuntimeError as exc:
                    if side is sides[0]:
                        raise
                    dropped = str(exc)
                    sides.remove(side)
                    continue
                figures[0].append(one["s"])
                figures[1].append(one["rss_mib"])
                figures[2] += [t for t, x in one["lines"] if x.startswith("started run")][:1]
                figures[3][0] += fake.fake_calls - before
        for side in sides:
            times, rss, started, calls = got[side["name"]]
            ordered = sorted(times)
            side["figures"][cmd] = {
                "median_s": statistics.median(times),
                "p90_s": ordered[round(0.9 * (len(ordered) - 1))],
                "peak_rss_mib": max(rss),
                "started_median_s": statistics.median(started) if started else None,
                "calls_per_run": calls[0] / runs,
                "times_s": times,
            }
    return dropped


def old_cli(venv: Path) -> Path:
    """armature-agents 0.7.0's CLI, installed into ``venv`` when missing; else RuntimeError."""
    cli = venv / "bin" / "armature"
    if cli.exists():
        return cli
    _say(f"baseline: installing {OLD_PACKAGE} into {venv} (once)")
    base = getattr(sys, "_base_executable", sys.executable)
    for argv in ([base, "-m", "venv", str(venv)], [f"{venv}/bin/pip", "install", OLD_PACKAGE]):
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise RuntimeError(f"{' '.join(argv)} failed: {exc}") from None
        if done.returncode != 0:
            tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
            raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {tail}")
    if not cli.exists():
        raise RuntimeError(f"pip install {OLD_PACKAGE} made no {cli}")
    return cli


def side(name: str, cli: str, run: list[str], spec: Path, env: dict[str, str]) -> dict[str, Any]:
    _say(f"{name}: an untimed first run ({Path(cli).name} {' '.join(run)} SPEC)")
    made: dict[str, Any] = {"name": name, "env": env, "cwd": spec.parent, "figures": {}}
    made |= {"run": [cli, run[0], str(spec), *run[1:]], "help": [cli, "--help"]}
    made["validate"] = [cli, "validate", str(spec)]
    made["figures"]["first_run_s"] = timed(made["run"], made)["s"]
    return made


def measure(runs: int, skip_baseline: bool, old_venv: Path) -> dict[str, Any]:
    result: dict[str, Any] = {"runs": runs, "stages": STAGES, "cpus": os.cpu_count()}
    result |= {"load_avg": os.getloadavg()[0], "target_run_s": TARGET_RUN_S}
    result |= {"target_cli_s": TARGET_CLI_S, "quoted_old_s": QUOTED_OLD_S, "baseline": None}
    with fake_openai_server() as fake, tempfile.TemporaryDirectory(prefix="short-run-") as tmp:
        work = Path(tmp)
        spec = work / "short-run.yaml"
        text = SPEC_TEMPLATE.format(base=f"http://127.0.0.1:{fake.server_address[1]}/v1")
        spec.write_text(text + "".join(STAGE_LINE.format(i=i, p=i - 1) for i in range(2, 6)))
        env = {**os.environ, "FAKE_OPENAI_KEY": "fake-key", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
        for key in ("TEMPORAL_ADDRESS", "ARMATURE_TASK_QUEUE", "PYTHONDONTWRITEBYTECODE"):
            env.pop(key, None)
        # Both engines run from bytecode, as a pip install leaves them (pip compiles at install;
        # a checkout under PYTHONDONTWRITEBYTECODE=1 would compile every module on every run).
        env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
        ours_env = {**env, "ARMATURE_HOME": str(work / "home")}
        ours_env |= {"ARMATURE_DEV_PORT": str(free_port()), "ARMATURE_UI_PORT": str(free_port())}
        cli = ROOT / ".venv" / "bin" / "armature"
        cli_name = str(cli) if cli.exists() else shutil.which("armature") or "armature"
        try:
            sides = [side("armature", cli_name, ["submit", "--wait"], spec, ours_env)]
            if skip_baseline:
                result["baseline_skipped"] = "--skip-baseline"
            else:
                try:
                    (work / "home07").mkdir()  # 0.7.0 writes ~/.armature
                    old_env = {**env, "HOME": str(work / "home07")}
                    old_run = ["run", "--force", "--no-cache"]
                    sides.append(side("0.7.0", str(old_cli(old_venv)), old_run, spec, old_env))
                except (RuntimeError, OSError) as exc:
                    result["baseline_skipped"] = str(exc)
                    _say(f"baseline not measured: {exc}")
            _say(f"timing {runs} runs of each command, {' and '.join(s['name'] for s in sides)}")
            if dropped := alternate(sides, runs, fake):
                result["baseline_skipped"] = dropped
        finally:
            stop = [cli_name, "dev", "stop"]
            subprocess.run(stop, env=ours_env, cwd=work, capture_output=True, timeout=60)
    result["armature"] = ours = sides[0]["figures"]
    if len(sides) > 1:
        result["baseline"] = old = sides[1]["figures"]
        commands = ("run", "help", "validate")
        result["ratio"] = {k: ours[k]["median_s"] / old[k]["median_s"] for k in commands}
    return result


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:7.0f} ms"


def _verdict(seconds: float, target: float) -> str:
    verdict = "ok" if seconds <= target else "MISSED"
    return f"{_ms(seconds).strip()} ≤ {target * 1000:.0f} ms: {verdict}"


def report(r: dict[str, Any]) -> None:
    ours, old = r["armature"], r["baseline"]
    print(
        f"{r['stages']}-stage chain, instant fake endpoint, {r['runs']} timed runs of each command"
        f" (spawn to exit); {r['cpus']} CPUs, load average {r['load_avg']:.2f} at the start"
    )
    print(f"{'':26} {'median':>10} {'p90':>10} {'peak RSS':>10} {'model calls/run':>16}")
    sides = [("armature", ours)] + ([("0.7.0", old)] if old else [])
    for cmd, suffix in {"run": "", "help": " --help", "validate": " validate SPEC"}.items():
        for label, figures in sides:
            f = figures[cmd]
            name = label + (suffix or (" submit --wait" if label == "armature" else " run"))
            calls = f" {f['calls_per_run']:16.1f}" if cmd == "run" else ""
            row = f"{name:26} {_ms(f['median_s'])} {_ms(f['p90_s'])} {f['peak_rss_mib']:6.0f} MiB"
            print(row + calls)
    if (started := ours["run"]["started_median_s"]) is not None:
        rest = _ms(ours["run"]["median_s"] - started).strip()
        print(
            f"armature submit --wait: 'started run' at {_ms(started).strip()} (median; imports, "
            f"compile, connect, start), then {rest} to its exit"
        )
    first = f"untimed first run: armature {_ms(ours['first_run_s']).strip()} (starts the stack)"
    print(first + (f", 0.7.0 {_ms(old['first_run_s']).strip()}" if old else ""))
    if old:
        ratio = r["ratio"]
        print(
            f"armature/0.7.0 (medians): run {ratio['run']:.2f}×, --help {ratio['help']:.2f}×, "
            f"validate {ratio['validate']:.2f}×; issue #27 quotes 0.7.0 at "
            f"{r['quoted_old_s']:.2f} s per run"
        )
    if r.get("baseline_skipped"):
        print(f"baseline not measured: {r['baseline_skipped']}")
    print(
        f"targets: run {_verdict(ours['run']['median_s'], r['target_run_s'])}; "
        f"--help {_verdict(ours['help']['median_s'], r['target_cli_s'])}; "
        f"validate {_verdict(ours['validate']['median_s'], r['target_cli_s'])}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=10, help="timed runs of each command")
    parser.add_argument("--skip-baseline", action="store_true", help="do not run 0.7.0")
    default_venv = Path(tempfile.gettempdir()) / "armature07-venv"
    parser.add_argument(
        "--old-venv", type=Path, default=default_venv, help=f"virtualenv with {OLD_PACKAGE}"
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    try:
        result = measure(max(1, args.runs), args.skip_baseline, args.old_venv)
    except RuntimeError as exc:
        _say(f"short_run: {exc}")
        return 1
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        report(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
