"""Armature's data converter: pydantic models on the wire, large payloads stored outside history.

Payloads above ``ARMATURE_PAYLOAD_THRESHOLD`` bytes (default 128 KiB) go to external storage
through the Temporal SDK's ``ExternalStorage`` hook, and history keeps only a small reference,
so a 1 MiB stage output never bloats a run's history. The default driver writes
content-addressed files under ``$ARMATURE_HOME/payloads`` (``$ARMATURE_PAYLOAD_DIR``
overrides); on a cluster point that at a volume every worker and client shares, or pass your own
driver (S3, GCS, ...) to :func:`data_converter`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import (
    DataConverter,
    ExternalStorage,
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)

from armature_temporal.errors import ArmatureError
from armature_temporal.runtime.private import write_private
from armature_temporal.settings import armature_home

__all__ = [
    "DEFAULT_THRESHOLD",
    "MAX_STAGE_OUTPUT",
    "LocalFileDriver",
    "PayloadTooLarge",
    "data_converter",
    "payload_dir",
]

DEFAULT_THRESHOLD = 128 * 1024
#: A single stage output larger than this is refused (non-retryable), naming the stage.
MAX_STAGE_OUTPUT = 64 * 1024 * 1024


class PayloadTooLarge(ArmatureError):
    """A stage produced more data than Armature will carry."""


def payload_dir() -> Path:
    return Path(os.environ.get("ARMATURE_PAYLOAD_DIR") or armature_home() / "payloads")


class LocalFileDriver(StorageDriver):
    """Content-addressed files: ``<root>/<sha256[:2]>/<sha256>``. Writing is idempotent."""

    def __init__(self, root: Path | None = None) -> None:
        self._root = root

    @property
    def root(self) -> Path:
        return self._root or payload_dir()

    def name(self) -> str:
        return "armature-local-files"

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        return await asyncio.to_thread(self._store_sync, payloads)

    def _store_sync(self, payloads: Sequence[Payload]) -> list[StorageDriverClaim]:
        claims = []
        for payload in payloads:
            data = payload.SerializeToString()
            digest = hashlib.sha256(data).hexdigest()
            path = self.root / digest[:2] / digest
            if not path.exists():
                write_private(path, data)  # 0600 in a 0700 directory: run data is private
            claims.append(StorageDriverClaim(claim_data={"sha256": digest, "size": str(len(data))}))
        return claims

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        return await asyncio.to_thread(self._retrieve_sync, claims)

    def _retrieve_sync(self, claims: Sequence[StorageDriverClaim]) -> list[Payload]:
        out = []
        for claim in claims:
            digest = claim.claim_data["sha256"]
            path = self.root / digest[:2] / digest
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                raise ArmatureError(
                    f"stored payload {digest[:12]}… is missing from {self.root}; this process "
                    "must see the same ARMATURE_PAYLOAD_DIR as the workers that wrote it"
                ) from None
            if hashlib.sha256(data).hexdigest() != digest:
                raise ArmatureError(f"stored payload {path} is corrupt (hash mismatch)")
            payload = Payload()
            payload.ParseFromString(data)
            out.append(payload)
        return out


def data_converter(
    driver: StorageDriver | None = None, threshold: int | None = None
) -> DataConverter:
    """The pydantic converter with external storage for large payloads."""
    limit = (
        threshold
        if threshold is not None
        else int(os.environ.get("ARMATURE_PAYLOAD_THRESHOLD") or DEFAULT_THRESHOLD)
    )
    storage = ExternalStorage(drivers=[driver or LocalFileDriver()], payload_size_threshold=limit)
    return dataclasses.replace(pydantic_data_converter, external_storage=storage)
