"""Secrets: API keys, tokens, private keys and passwords, by format and by context.

Three kinds of detector, each a :class:`~._secret_rules.SecretRule`:

- ``token`` — a provider's documented key format, with its fixed prefix and length
  (``sk-proj-…T3BlbkFJ…``, ``ghp_`` + 36, ``AKIA`` + 16, ``xoxb-…``). High precision.
- ``keylike`` — a bare ``sk-`` key (``sk-proj-…``, ``sk-svcacct-…``, ``sk-`` + 48) without a
  provider's fixed marker: found without a keyword before it when the part after the prefix
  looks random (long, letters and digits, high entropy, not words).
- ``credential`` — a password or token in a place that only holds one: a URL's
  ``user:password@``, ``curl -u``, an ``Authorization:`` header, an ``.npmrc`` auth token.
- ``assignment`` — a key-like name (``client_secret``, ``DB_PASSWORD``, ``apiKey``) assigned
  a value that looks random: long enough, mixed characters, enough entropy, not an
  identifier, path or URL.

Every candidate value then passes :func:`placeholder_reason`: documentation placeholders
(``xxxx…``, ``<your token>``, ``${TOKEN}``, ``AKIA…EXAMPLE``, ``[Redacted]``, truncated
``ops_eyJ…``) are not secrets, whichever detector found them. The price: fixtures made of
filler (``AP6xxxxxxxxxx``, ``AKIAZZZZ…``) are not flagged even where a data set labels them
secrets; detect-secrets' tests call such strings secrets while gitleaks' call the same shape
(an AWS key id padded with capital X, ``ghu_xxxx…``) placeholders, and no rule can side with
both.

Keys that gitleaks' own rules allow-list by exact value because they are published as
public (:data:`~._secret_rules.KNOWN_PUBLIC_KEYS`: Firebase SDK sample Google keys, the npm
search-only Algolia key) are not reported either; any other value of the same format is.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections import Counter
from dataclasses import dataclass

from armature_temporal.scanner._models import Finding, mask
from armature_temporal.scanner._secret_rules import KNOWN_PUBLIC_KEYS, SECRET_RULES

__all__ = ["Rejection", "detect_secrets", "entropy", "placeholder_reason"]


@dataclass(frozen=True)
class Rejection:
    """A candidate a rule matched and a check turned down, with why (for benchmarks)."""

    rule: str
    span: tuple[int, int]
    reason: str


# --- checks ---------------------------------------------------------------------------------

_TEMPLATE = re.compile(
    r"\$\{|\{\{|<%|%\(|%s\b|\$\(|^\$[A-Za-z_]|^<.*>$|^\{.*\}$|^\[.*\]$|\bnull\b|\bnone\b"
    r"|^(?:true|false|undefined)$|^process\.env|^os\.environ|^env\.|\benv\(",
    re.IGNORECASE,
)
_PLACEHOLDER_WORDS = re.compile(
    r"example|placeholder|redacted|your[_-]?(?:api|key|token|secret|password|own)|yourkey"
    r"|insert[_-]|changeme|change[_-]me|dummy|sample|[_-]here\b|here$|^here|put[_-]your"
    r"|replace[_-]?me|xxxx|\*\*\*|\.\.\.|…|•",
    re.IGNORECASE,
)
_REPEATED_CHUNK = re.compile(r"([A-Za-z0-9]{3,8})(?:[^A-Za-z0-9]?\1){2,}")
_SEQUENCES = ("0123456", "1234567", "abcdefg", "qwerty")
_IDENTIFIER = re.compile(
    r"^(?:[A-Z][A-Z0-9]*(?:[_-][A-Z0-9]+)+|[a-z][a-z0-9]*(?:[._-][a-z][a-z0-9]*)+"
    r"|[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?:\(\))?|[a-z]+(?:[A-Z][a-z]+)+)$"
)
_PATHLIKE = re.compile(
    r"^(?:[~.]?/|[A-Za-z]:\\|https?://|[\w.-]+\.(?:pem|p12|key|json|ya?ml|txt)$)"
)
_VERSION = re.compile(r"\d+\.\d+\.\d+|[\w.-]+:[\w.-]+:\d")
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.I)
_NOT_SECRET_NAMES = re.compile(
    r"public|(?:^|[_.-])(?i:id|name|size|length|len|file|path|url|uri|type|version|hash|count"
    r"|format|prefix|field|header|endpoint|expir\w*|ttl|timeout|max|min|label|kind|mode"
    r"|policy|regex|pattern)$|(?:Id|Name|Size|Length|File|Path|Url|Type|Version)$|^key_?id$"
    r"|accessor|keyword|tokenizer|tokens$|csrf|xsrf",
    re.IGNORECASE,
)


def entropy(value: str) -> float:
    """Shannon entropy of ``value`` in bits per character."""
    n = len(value)
    if not n:
        return 0.0
    return -sum(c / n * math.log2(c / n) for c in Counter(value).values())


def _longest_run(value: str) -> int:
    best = run = 0
    prev = ""
    for ch in value:
        run = run + 1 if ch == prev else 1
        prev = ch
        best = max(best, run)
    return best


def placeholder_reason(value: str) -> str | None:
    """Why ``value`` is a placeholder rather than a secret, or None if it may be real."""
    if _TEMPLATE.search(value):
        return "template or variable reference"
    if _PLACEHOLDER_WORDS.search(value):
        return "placeholder word or filler"
    low = value.lower()
    if any(seq in low for seq in _SEQUENCES):
        return "sequential filler"
    if len(value) >= 6 and len(set(value)) <= 3:
        return "too few distinct characters"
    if _REPEATED_CHUNK.search(value):
        return "a repeated chunk"
    run = _longest_run(value)
    if run >= 6 or (len(value) >= 8 and run * 3 >= len(value)):
        return "long run of one character"
    return None


def _token_reason(value: str, prefix_len: int = 0) -> str | None:
    body = value[prefix_len:] if prefix_len < len(value) else value
    reason = placeholder_reason(body)
    if reason:
        return reason
    if len(body) >= 16 and entropy(body) < 2.5:
        return "low entropy"
    return None


def _prefix_len(value: str) -> int:
    m = re.match(r"[A-Za-z0-9]{1,8}?[_.-]|[A-Z]{2,4}(?=[A-Z2-7]{16}$)", value)
    return m.end() if m else 0


_KEYLIKE_PREFIX = re.compile(r"sk-(?:(?:proj|svcacct|admin|None)-)?")


def _keylike_reason(value: str) -> str | None:
    """A bare ``sk-…`` key: the body after the prefix must look generated, not written."""
    prefix = _KEYLIKE_PREFIX.match(value)
    body = value[prefix.end() :] if prefix else value
    reason = placeholder_reason(body)
    if reason:
        return reason
    if not (any(c.isdigit() for c in body) and any(c.isalpha() for c in body)):
        return "no mix of letters and digits"
    if max(len(chunk) for chunk in re.split(r"[_-]", body)) < 16:
        return "dash-separated words, not a key (keys have long runs without - or _)"
    if entropy(body) < 3.5:
        return "low entropy"
    return None


def _assignment_reason(name: str, value: str) -> str | None:
    if _NOT_SECRET_NAMES.search(name):
        return "name is not a secret's (id, name, path, public …)"
    reason = placeholder_reason(value)
    if reason:
        return reason
    is_password = re.search(r"passw|pwd", name, re.IGNORECASE) is not None
    if _UUID.match(value) and not is_password:
        return "a UUID (an identifier, not a key)"
    if _IDENTIFIER.match(value) or _PATHLIKE.match(value) or _VERSION.search(value):
        return "an identifier, path or URL"
    has_digit = any(c.isdigit() for c in value)
    has_alpha = any(c.isalpha() for c in value)
    if is_password:
        if len(value) < 8 or not (has_digit or not value.isalpha()):
            return "too short or simple for a password"
        return None
    if len(value) < 12:
        return "too short for a key"
    if not (has_digit and has_alpha) and len(value) < 24:
        return "no mix of letters and digits"
    if entropy(value) < 3.0:
        return "low entropy"
    if re.fullmatch(r"[a-z]+(?:[_-][a-z]+)*", value):
        return "lower-case words"
    return None


def _credential_reason(rule: str, value: str) -> str | None:
    if rule == "curl-user":
        whole = value.strip("'\"")
        if whole.startswith("<") and whole.endswith(">"):
            return "template or variable reference"
        user, sep, password = whole.partition(":")
        if not sep:
            return "no password given"
        parts = [_unbrace(p.strip("'\"")) for p in (user, password)]
        if any(_TEMPLATE.search(p) for p in parts):
            return "template or variable reference"
        secret = parts[1] or parts[0]
        if not secret:
            return "empty credentials"
        value = secret
    if rule == "basic-auth-header":
        return _basic_reason(value)
    if rule == "url-credentials" and value.isdigit() and len(value) <= 5:
        return "a port, not a password"
    if rule in ("webhook-url", "gcp-service-account"):
        return None
    reason = placeholder_reason(value)
    if reason:
        return reason
    if len(value) < 6:
        return "too short for a credential"
    if rule in ("authorization-header", "basic-auth-header"):
        if value.lower() in ("basic", "bearer", "token", "digest"):
            return "scheme without credentials"
        if not any(c.isdigit() for c in value):
            return "no digits: prose, not a credential"
    return None


_BRACED_VALUE = re.compile(r"^\{([^{}]*\d[^{}]*)\}$")


def _unbrace(part: str) -> str:
    """``{ZqL5kVrX1n8tA2}`` -> the value inside; ``{password}`` stays a template."""
    m = _BRACED_VALUE.match(part)
    return m.group(1) if m and not _IDENTIFIER.match(m.group(1)) else part


def _basic_reason(value: str) -> str | None:
    """HTTP Basic credentials are base64 of ``user:password``; either half may be the key."""
    try:
        decoded = base64.b64decode(value, validate=True).decode("utf-8", errors="replace")
    except binascii.Error:
        return "not base64 of user:password"
    user, sep, password = decoded.partition(":")
    if not sep or not decoded.isprintable():
        return "not base64 of user:password"
    secret = password or user
    if not secret.strip():
        return "empty credentials"
    return placeholder_reason(secret) or placeholder_reason(user)


def _jwt_reason(value: str) -> str | None:
    parts = value.split(".")
    for i, part in enumerate(parts[:2]):
        try:
            decoded = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
            obj = json.loads(decoded)
        except (binascii.Error, ValueError):
            return "header or payload is not base64 JSON"
        if not isinstance(obj, dict) or (i == 0 and not ({"alg", "typ"} & obj.keys())):
            return "header has no alg/typ"
    return None


def _pem_reason(body: str) -> str | None:
    data = re.sub(r"[\s]|^[\w-]+:.*$", "", body, flags=re.MULTILINE)
    if len(data) < 64 or placeholder_reason(data[:200]):
        return "no key material"
    return None


def detect_secrets(text: str) -> tuple[list[Finding], list[Rejection]]:
    """Secret findings in ``text``, and the candidates turned down (with reasons)."""
    findings: list[Finding] = []
    rejections: list[Rejection] = []
    for rule in SECRET_RULES:
        for m in rule.pattern.finditer(text):
            group = next((g for g in ("v", "w", "q", "u") if m.groupdict().get(g)), None)
            if group is None:
                continue
            start, end = m.span(group)
            value = m.group(group)
            if value in KNOWN_PUBLIC_KEYS:
                reason: str | None = "a published public key (source allow-list)"
            elif rule.kind == "token":
                reason = _token_reason(value, _prefix_len(value))
            elif rule.kind == "keylike":
                reason = _keylike_reason(value)
            elif rule.kind == "assignment":
                reason = _assignment_reason(m.group("name"), value)
            elif rule.kind == "jwt":
                reason = _jwt_reason(value)
            elif rule.kind == "pem":
                reason = _pem_reason(value)
                start, end = m.span()
                value = m.group()
            else:
                reason = _credential_reason(rule.name, value)
            if reason:
                rejections.append(Rejection(rule.name, (start, end), reason))
                continue
            findings.append(
                Finding(
                    category="secret",
                    span=(start, end),
                    text=mask(value),
                    score=rule.score,
                    rule=rule.name,
                )
            )
    return _dedupe(findings), rejections


def _dedupe(findings: list[Finding]) -> list[Finding]:
    """Keep the highest-scoring finding among those whose spans overlap."""
    kept: list[Finding] = []
    for f in sorted(findings, key=lambda f: (-f.score, f.span[0] - f.span[1])):
        if all(f.span[1] <= k.span[0] or f.span[0] >= k.span[1] for k in kept):
            kept.append(f)
    return sorted(kept, key=lambda f: f.span)
