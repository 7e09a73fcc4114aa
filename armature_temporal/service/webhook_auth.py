"""Who may start runs over a webhook: the bearer secret, or a fresh signature.

A signed delivery carries ``X-Armature-Timestamp: <unix seconds>`` and
``X-Armature-Signature-256: sha256=<hex>``, the HMAC-SHA256, keyed by the secret, of five
lines (:func:`signed_string`)::

    <timestamp>\n<METHOD>\n<path>\n<idempotency key, or nothing>\n<raw body>

The timestamp must be within the tolerance (300 s by default) of the server's clock, so a
captured request stops working minutes later; the method and the path are signed, so a
delivery signed for one hook is refused by another, and a signed ``GET`` is no ``POST``; the
idempotency key is signed, so a captured request cannot be replayed under a new key to start
a second run; and a replay of the very same signed request within the window starts no second
run either (its run id comes from the key, or from the signature when there is no key). The
fields are separated by newlines, which none of the first four can hold, so no two requests
sign the same string. Signatures of the body alone (the scheme before, and GitHub's
``X-Hub-Signature-256``) are refused unless the server accepts them explicitly (``armature
serve --accept-body-signatures``, deprecated): they never expire and name no hook, so each
distinct body then starts at most one run per hook, whatever key it comes with.

Checked in two steps so that nobody without credentials gets the server to read a body:
:func:`check_headers` before the body is read, :func:`verify_body` after. Pure: the clock is
an argument.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass

from armature_temporal.errors import ArmatureError

__all__ = [
    "DEFAULT_TOLERANCE_S",
    "SIGNATURE_HEADERS",
    "SIGNED_FORM",
    "TIMESTAMP_HEADER",
    "AuthPolicy",
    "PendingSignature",
    "WebhookRequestError",
    "authenticate",
    "check_headers",
    "sign",
    "signed_string",
    "verify_body",
]

#: Headers that may carry ``sha256=<hex>``; the first is Armature's, the second GitHub's.
SIGNATURE_HEADERS = ("x-armature-signature-256", "x-hub-signature-256")
#: The header with the unix time (whole seconds) a signature was made at.
TIMESTAMP_HEADER = "x-armature-timestamp"
#: How far (seconds, either way) a signature's timestamp may be from the server's clock.
DEFAULT_TOLERANCE_S = 300

#: The signed string, as the messages spell it (``\n`` is a newline).
SIGNED_FORM = "'<timestamp>\\n<METHOD>\\n<path>\\n<Idempotency-Key or empty>\\n<raw body>'"

HOW_TO_SIGN = (
    "send `Authorization: Bearer <secret>`, or sign each request: "
    "`X-Armature-Timestamp: <unix seconds now>` and `X-Armature-Signature-256: sha256=<hex "
    f"HMAC-SHA256 keyed by the secret of {SIGNED_FORM}>`, five fields joined by newlines, "
    "the path without the query (the secret is $ARMATURE_WEBHOOK_SECRET of the server)"
)


class WebhookRequestError(ArmatureError):
    """A request the server answers with an HTTP error; ``status`` is the code."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class AuthPolicy:
    """What the server accepts: no secret means no check."""

    secret: str | None
    tolerance_s: int = DEFAULT_TOLERANCE_S
    accept_body_signatures: bool = False


@dataclass(frozen=True)
class PendingSignature:
    """A signature that passed the header checks and still has to match the body.

    ``dedupe`` is what makes a replay of this very request start no second run: the
    delivery's run id is derived from it when the request has no idempotency key (and always
    for a body-only signature, which never expires).
    """

    given: bytes
    timestamp: int | None
    key: str
    header: str
    method: str = "POST"
    path: str = "/"

    @property
    def dedupe(self) -> str:
        return ("sig:" if self.timestamp is not None else "body-sig:") + self.given.decode(
            "ascii", "replace"
        )


def signed_string(timestamp: int, method: str, path: str, key: str, body: bytes) -> bytes:
    """The bytes a sender signs: ``<timestamp>\\n<METHOD>\\n<path>\\n<key>\\n<body>``
    (the key's and the path's text as UTF-8)."""
    head = f"{timestamp}\n{method.upper()}\n{path}\n{key}\n"
    return head.encode("utf-8", "surrogateescape") + body


def sign(
    secret: str,
    body: bytes,
    *,
    timestamp: int,
    path: str,
    method: str = "POST",
    key: str = "",
) -> dict[str, str]:
    """The headers that sign a ``method`` request to ``path`` with ``body`` (and ``key``,
    sent as ``Idempotency-Key``) at ``timestamp``: what a sender in Python adds to it."""
    message = signed_string(timestamp, method, path, key, body)
    digest = hmac.new(secret.encode(), message, hashlib.sha256)
    headers = {
        "X-Armature-Timestamp": str(timestamp),
        "X-Armature-Signature-256": "sha256=" + digest.hexdigest(),
    }
    if key:
        headers["Idempotency-Key"] = key
    return headers


def _raw(value: str) -> bytes:
    # Header values arrive decoded with surrogateescape (webhooks._headers): these are the
    # bytes on the wire, so a UTF-8 secret compares as UTF-8.
    return value.encode("utf-8", "surrogateescape")


def check_headers(
    policy: AuthPolicy,
    headers: Mapping[str, str],
    *,
    now: float,
    key: str | None,
    method: str,
    path: str,
    allow_body_signature: bool = True,
) -> PendingSignature | None:
    """The first step, on the headers alone: None when the request is authentic (a right
    bearer token, or no secret), a :class:`PendingSignature` to check against the body.

    ``headers`` have lower-case names. ``key`` is the request's idempotency key; ``method``
    and ``path`` (without the query) are the request's, both signed.
    ``allow_body_signature`` False refuses body-only signatures even where the policy
    accepts them (GET requests: a signed empty body would be a password that never expires).

    Raises:
        WebhookRequestError: 401 saying what was wrong and how to sign; 400 for an
            idempotency key that cannot be signed unambiguously.
    """
    if not policy.secret:
        return None
    auth = headers.get("authorization", "")
    scheme, _, token = auth.partition(" ")
    if scheme.lower() == "bearer":
        # Bytes against bytes: a non-ASCII secret works, and compare_digest never sees str.
        if hmac.compare_digest(_raw(token.strip()), policy.secret.encode()):
            return None
        raise WebhookRequestError(401, f"the bearer token is wrong; {HOW_TO_SIGN}")
    given, header = _signature(headers)
    if given is None:
        raise WebhookRequestError(401, f"no credentials; {HOW_TO_SIGN}")
    stamp = headers.get(TIMESTAMP_HEADER)
    if stamp is None:
        if policy.accept_body_signatures and allow_body_signature:
            return PendingSignature(given, None, "", header)
        raise WebhookRequestError(
            401,
            f"{header} without X-Armature-Timestamp: a signature of the body alone never "
            "expires, so a captured request could be replayed forever; it is refused. Sign "
            f"{SIGNED_FORM} and send the timestamp: {HOW_TO_SIGN}. (A sender that cannot, "
            "such as GitHub, needs the server started with --accept-body-signatures, "
            "deprecated.)",
        )
    stamp = stamp.strip()
    if not stamp.isascii() or not stamp.isdigit():
        raise WebhookRequestError(
            401,
            f"X-Armature-Timestamp {stamp!r} is not a unix time in whole seconds; {HOW_TO_SIGN}",
        )
    timestamp = int(stamp)
    skew = now - timestamp
    if abs(skew) > policy.tolerance_s:
        when = "old" if skew > 0 else "in the future"
        raise WebhookRequestError(
            401,
            f"X-Armature-Timestamp {timestamp} is {abs(skew):.0f} s {when} (the server accepts "
            f"{policy.tolerance_s} s either way): sign each request when it is sent, with the "
            "current time, and check the sender's clock",
        )
    return PendingSignature(given, timestamp, key or "", header, method.upper(), path)


def _signature(headers: Mapping[str, str]) -> tuple[bytes | None, str]:
    for name in SIGNATURE_HEADERS:
        value = headers.get(name)
        if value is not None:
            return _raw(value.strip().lower()), _title(name)
    return None, ""


def _title(name: str) -> str:
    return "-".join(part.capitalize() for part in name.split("-"))


def verify_body(policy: AuthPolicy, pending: PendingSignature, body: bytes) -> None:
    """The second step: the pending signature must be the HMAC of what was signed.

    Raises:
        WebhookRequestError: 401 saying what the signature must cover.
    """
    secret = (policy.secret or "").encode()
    if pending.timestamp is None:
        message = body
        covers = "the raw body"
    else:
        message = signed_string(pending.timestamp, pending.method, pending.path, pending.key, body)
        lines = [str(pending.timestamp), pending.method, pending.path, pending.key]
        covers = (
            f"the lines {lines!r}, each followed by a newline, then the raw body (timestamp, "
            "method, path, key)"
        )
    expected = ("sha256=" + hmac.new(secret, message, hashlib.sha256).hexdigest()).encode()
    if hmac.compare_digest(pending.given, expected):
        return
    raise WebhookRequestError(
        401,
        f"the {pending.header} does not match: for this request it must be sha256=<hex "
        f"HMAC-SHA256 keyed by the secret of {covers}> (the key is the Idempotency-Key "
        "header, empty when there is none; the path is the hook's, without the query); check "
        "the secret, and sign the method, path and bytes you send",
    )


def authenticate(
    policy: AuthPolicy,
    headers: Mapping[str, str],
    body: bytes,
    *,
    now: float,
    method: str,
    path: str,
    key: str | None = None,
    allow_body_signature: bool = True,
) -> PendingSignature | None:
    """Both steps at once, for a ``method`` request to ``path`` whose body is at hand;
    returns the signature that authenticated it (None for a bearer token or no secret).

    Raises:
        WebhookRequestError: as :func:`check_headers` and :func:`verify_body`.
    """
    pending = check_headers(
        policy,
        headers,
        now=now,
        key=key,
        method=method,
        path=path,
        allow_body_signature=allow_body_signature,
    )
    if pending is not None:
        verify_body(policy, pending, body)
    return pending
