# The Armature image (workers and the webhook server), built from this repository by
# docker-compose.temporal.yml:
#   docker compose -f docker-compose.temporal.yml build armature-worker
# or on its own (from the repository root):
#   docker build -f deploy/worker.Dockerfile -t armature-worker .
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
# .dockerignore keeps the virtualenv, caches and .git out of the build context.
COPY . .
# Extras: `serve` for the optional armature-webhooks service (`armature serve`). Workers that
# run the fine-tune loop or serve `provider: local` tiers need `finetune` too (torch: large):
#   docker compose -f docker-compose.temporal.yml build --build-arg EXTRAS=serve,finetune
ARG EXTRAS=serve
RUN pip install ".[${EXTRAS}]"

# Run as an unprivileged user; /data is ARMATURE_HOME and /shared the payloads and workspaces
# that workers and tools workers share (volumes in the compose file; a fresh
# named volume takes this directory's owner).
RUN useradd --create-home --uid 10001 armature \
    && mkdir -p /data /shared \
    && chown armature:armature /data /shared
USER armature
ENV ARMATURE_HOME=/data

# Connection settings come from the environment: TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE,
# ARMATURE_TASK_QUEUE, ARMATURE_DB_URL, ARMATURE_HOME, and for Temporal Cloud TEMPORAL_TLS_CERT /
# TEMPORAL_TLS_KEY or TEMPORAL_API_KEY.
# Plain `armature worker` also starts a tools-only child without the provider secrets; the
# compose file runs the tools workers in containers of their own instead (--no-tools here).
CMD ["armature", "worker"]
