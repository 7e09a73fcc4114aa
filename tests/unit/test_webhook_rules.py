"""Webhook triggers, the parts that decide: which hook, which inputs, which run id, whether
a request is authentic. Pure: no server (tests/workflows/test_webhooks.py has those)."""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest

from armature_temporal.service.webhook_auth import (
    AuthPolicy,
    WebhookRequestError,
    authenticate,
    check_headers,
    sign,
    verify_body,
)
from armature_temporal.service.webhooks import (
    WebhookConfigError,
    collect_hooks,
    delivery_run_id,
    hook_inputs,
)
from tests.fakes import plan_from

SPEC = """\
name: {name}
model_tiers: {{small: {{provider: simulate}}}}
inputs:
  type: object
  properties:
    ticket: {{type: string}}
    tier: {{type: string, default: free}}
triggers:
  - {{type: cron, schedule: "0 3 * * *"}}
  - {{type: webhook, path: {path}, inputs: {{tier: pro}}}}
stages:
  - {{id: s, role: {{name: S, description: "{{{{ inputs.ticket }}}}"}}}}
"""


def spec(name: str = "triage", path: str = "/hooks/triage") -> str:
    return SPEC.format(name=name, path=path)


def test_hooks_are_keyed_by_path_and_skip_cron_triggers() -> None:
    hooks = collect_hooks([plan_from(spec()), plan_from(spec("billing", "/hooks/billing"))])
    assert sorted(hooks) == ["/hooks/billing", "/hooks/triage"]
    hook = hooks["/hooks/triage"]
    assert hook.plan.name == "triage"
    assert hook.trigger_index == 1
    assert hook.inputs == {"tier": "pro"}


def test_two_specs_claiming_one_path_is_an_error_naming_both() -> None:
    with pytest.raises(WebhookConfigError, match=r"'/hooks/triage'.*'triage'.*'other'"):
        collect_hooks([plan_from(spec()), plan_from(spec("other"))])


def test_specs_without_webhooks_are_an_error_that_shows_how_to_add_one() -> None:
    plan = plan_from(
        "name: plain\nmodel_tiers: {small: {provider: simulate}}\n"
        "stages: [{id: s, role: {name: S, description: hi}}]\n"
    )
    with pytest.raises(WebhookConfigError, match=r"no webhook triggers.*'plain'.*type: webhook"):
        collect_hooks([plan])


def test_body_keys_override_the_trigger_inputs() -> None:
    hook = collect_hooks([plan_from(spec())])["/hooks/triage"]
    assert hook_inputs(hook, b"") == {"tier": "pro"}
    assert hook_inputs(hook, b"  \n") == {"tier": "pro"}
    assert hook_inputs(hook, b'{"ticket": "refund", "tier": "free"}') == {
        "ticket": "refund",
        "tier": "free",
    }
    assert hook.inputs == {"tier": "pro"}, "a request must not change the hook"


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        (b"not json", 400, "is not JSON"),
        (b"\xff\xfe", 400, "is not JSON"),
        (b"[1, 2]", 422, "must be a JSON object of run inputs, got list"),
        (b'"text"', 422, "got str"),
    ],
)
def test_bodies_that_are_not_an_object_are_refused(body: bytes, status: int, words: str) -> None:
    hook = collect_hooks([plan_from(spec())])["/hooks/triage"]
    with pytest.raises(WebhookRequestError, match=words) as caught:
        hook_inputs(hook, body)
    assert caught.value.status == status
    assert "/hooks/triage" in str(caught.value)


def test_delivery_run_ids_are_stable_per_key_and_path() -> None:
    hooks = collect_hooks([plan_from(spec()), plan_from(spec("billing", "/hooks/billing"))])
    a, b = hooks["/hooks/triage"], hooks["/hooks/billing"]
    assert delivery_run_id(a, "k1") == delivery_run_id(a, "k1")
    assert delivery_run_id(a, "k1").startswith("triage-wh-")
    assert delivery_run_id(a, "k1") != delivery_run_id(a, "k2")
    assert delivery_run_id(a, "k1").split("-wh-")[1] != delivery_run_id(b, "k1").split("-wh-")[1]


SECRET = "s3cret-for-tests"
BODY = b'{"ticket": "hi"}'
NOW = 1_800_000_000
POLICY = AuthPolicy(SECRET)
BODY_ONLY_SIG = "sha256=" + hmac.new(SECRET.encode(), BODY, hashlib.sha256).hexdigest()


HOOK = "/hooks/triage"
GET = {"method": "GET", "path": "/"}


def stamped(
    body: bytes = BODY, *, at: int = NOW, key: str = "", method: str = "POST", path: str = HOOK
) -> dict[str, str]:
    """Lower-case header names, as the app hands them over."""
    signed = sign(SECRET, body, timestamp=at, key=key, method=method, path=path)
    return {k.lower(): v for k, v in signed.items()}


def check(
    headers: dict[str, str],
    body: bytes = BODY,
    *,
    method: str = "POST",
    path: str = HOOK,
    **kw: object,
) -> object:
    key = headers.get("idempotency-key")
    return authenticate(  # type: ignore[misc]
        POLICY, headers, body, now=NOW, key=key, method=method, path=path, **kw
    )


@pytest.mark.parametrize(
    "headers",
    [
        {"authorization": f"Bearer {SECRET}"},
        {"authorization": f"bearer {SECRET}"},
        stamped(),
        stamped(key="delivery-7"),
        stamped(at=NOW - 300),
        stamped(at=NOW + 300),
        {
            "x-hub-signature-256": stamped()["x-armature-signature-256"]
            .upper()
            .replace("SHA", "sha"),
            "x-armature-timestamp": str(NOW),
        },
    ],
    ids=["bearer", "bearer-lower", "signed", "signed-key", "edge-old", "edge-future", "github"],
)
def test_the_secret_admits_a_bearer_token_or_a_fresh_signature(headers: dict[str, str]) -> None:
    check(headers)


@pytest.mark.parametrize(
    ("headers", "words"),
    [
        ({}, "no credentials"),
        ({"authorization": "Bearer wrong"}, "bearer token is wrong"),
        ({"authorization": f"Basic {SECRET}"}, "no credentials"),
        ({**stamped(), "x-armature-signature-256": "sha256=00"}, "does not match"),
        (
            {**stamped(), "x-armature-signature-256": BODY_ONLY_SIG},
            f"the lines ['{NOW}', 'POST', '{HOOK}', ''], each followed by a newline",
        ),
        ({"x-armature-signature-256": BODY_ONLY_SIG}, "without X-Armature-Timestamp"),
        ({"x-hub-signature-256": BODY_ONLY_SIG}, "X-Hub-Signature-256 without"),
        (stamped(at=NOW - 301), "is 301 s old (the server accepts 300 s either way)"),
        (stamped(at=NOW + 301), "is 301 s in the future"),
        ({**stamped(), "x-armature-timestamp": "soon"}, "'soon' is not a unix time"),
        ({**stamped(), "x-armature-timestamp": "1.8e9"}, "not a unix time"),
        ({**stamped(key="k-1"), "idempotency-key": "k-2"}, f"'POST', '{HOOK}', 'k-2']"),
        ({**stamped(), "idempotency-key": "k-2"}, "does not match"),
        ({"authorization": "Bearer s3cr\u00e9t"}, "bearer token is wrong"),
        ({**stamped(), "x-hub-signature-256": "sha256=\u00e9"}, "does not match"),
    ],
    ids=[
        "none",
        "wrong-token",
        "wrong-scheme",
        "tampered-sig",
        "body-only-sig-with-stamp",
        "body-only",
        "github-body-only",
        "old",
        "future",
        "not-a-number",
        "not-whole",
        "replayed-under-new-key",
        "key-added",
        "non-ascii",
        "non-ascii-sig",
    ],
)
def test_anything_else_is_401_saying_what_was_wrong_and_how_to_sign(
    headers: dict[str, str], words: str
) -> None:
    if "x-hub-signature-256" in headers and "x-armature-signature-256" in headers:
        del headers["x-armature-signature-256"]
    with pytest.raises(WebhookRequestError) as caught:
        check(headers)
    assert caught.value.status == 401
    assert words in str(caught.value)
    assert SECRET not in str(caught.value)


def test_the_401_for_no_credentials_spells_out_the_headers_and_the_signed_string() -> None:
    with pytest.raises(WebhookRequestError) as caught:
        check({})
    message = str(caught.value)
    for words in (
        "Authorization: Bearer <secret>",
        "X-Armature-Timestamp: <unix seconds now>",
        "X-Armature-Signature-256: sha256=<hex",
        "'<timestamp>\\n<METHOD>\\n<path>\\n<Idempotency-Key or empty>\\n<raw body>'",
        "five fields joined by newlines",
        "$ARMATURE_WEBHOOK_SECRET",
    ):
        assert words in message


def test_a_signature_covers_the_timestamp_the_key_and_the_body() -> None:
    headers = stamped(key="k")
    for changed in (
        {**headers, "x-armature-timestamp": str(NOW - 1)},
        {**headers, "idempotency-key": "k2"},
    ):
        with pytest.raises(WebhookRequestError):
            check(changed)
    with pytest.raises(WebhookRequestError):
        check(headers, BODY + b" ")


def test_a_signature_covers_the_method_and_the_path() -> None:
    """#25: a delivery signed for one hook, replayed to another, started a run there; and a
    signed GET (an empty body) was a valid POST."""
    to_triage = stamped(key="k")
    check(to_triage)
    with pytest.raises(WebhookRequestError, match="does not match") as other_hook:
        check(to_triage, path="/hooks/billing")
    assert "'/hooks/billing'" in str(other_hook.value)
    get = stamped(b"", method="GET", path="/")
    check(get, b"", method="GET", path="/")
    for method, path in (("POST", "/"), ("POST", HOOK), ("GET", HOOK)):
        with pytest.raises(WebhookRequestError, match="does not match"):
            check(get, b"", method=method, path=path)


def test_the_signed_fields_are_lines_so_no_two_requests_sign_the_same_string() -> None:
    from armature_temporal.service.webhook_auth import signed_string

    assert signed_string(NOW, "post", HOOK, "k", BODY) == (
        f"{NOW}\nPOST\n{HOOK}\nk\n".encode() + BODY
    )
    # The old '.'-joined fields let a dot move between the path, the key and the body.
    assert signed_string(NOW, "POST", "/h/a.b", "k", b"") != signed_string(
        NOW, "POST", "/h/a", "b.k", b""
    )
    check(stamped(key="a.b"))  # a key may hold a dot: the fields are lines


@pytest.mark.parametrize("path", ["/hooks/tri age", "/hooks/a\nb", "/h\x00"])
def test_a_hook_path_that_could_not_be_requested_or_signed_is_refused(path: str) -> None:
    with pytest.raises(WebhookConfigError, match="must start with '/' and hold no spaces"):
        collect_hooks([plan_from(spec(path=json.dumps(path)))])


def test_the_header_check_alone_refuses_without_the_body() -> None:
    pending = check_headers(POLICY, stamped(key="k"), now=NOW, key="k", method="POST", path=HOOK)
    assert pending is not None and pending.timestamp == NOW and pending.key == "k"
    verify_body(POLICY, pending, BODY)
    with pytest.raises(WebhookRequestError, match="does not match"):
        verify_body(POLICY, pending, b"{}")
    bearer = {"authorization": f"Bearer {SECRET}"}
    assert check_headers(POLICY, bearer, now=NOW, key=None, method="POST", path=HOOK) is None


def test_body_only_signatures_only_where_accepted_and_never_for_a_get() -> None:
    lenient = AuthPolicy(SECRET, accept_body_signatures=True)
    pending = authenticate(
        lenient, {"x-hub-signature-256": BODY_ONLY_SIG}, BODY, now=NOW, method="POST", path=HOOK
    )
    assert pending is not None and pending.timestamp is None
    assert pending.dedupe.startswith("body-sig:"), "its run id comes from the body's signature"
    with pytest.raises(WebhookRequestError, match="without X-Armature-Timestamp"):
        authenticate(
            lenient,
            {
                "x-armature-signature-256": "sha256="
                + hmac.new(SECRET.encode(), b"", "sha256").hexdigest()
            },
            b"",
            now=NOW,
            method="GET",
            path="/",
            allow_body_signature=False,
        )


def test_the_tolerance_is_configurable() -> None:
    strict = AuthPolicy(SECRET, tolerance_s=5)
    authenticate(strict, stamped(at=NOW - 5), BODY, now=NOW, method="POST", path=HOOK)
    with pytest.raises(WebhookRequestError, match="accepts 5 s either way"):
        authenticate(strict, stamped(at=NOW - 6), BODY, now=NOW, method="POST", path=HOOK)


def test_a_non_ascii_secret_compares_as_utf8_bytes() -> None:
    secret = "sécret-ü-密钥"
    # The app decodes header bytes as UTF-8 with surrogateescape: what the wire carried.
    wire = f"Bearer {secret}".encode().decode("utf-8", "surrogateescape")
    authenticate(AuthPolicy(secret), {"authorization": wire}, b"", now=NOW, **GET)
    latin1 = f"Bearer {secret}".encode().decode("latin-1")  # how Starlette would decode it
    with pytest.raises(WebhookRequestError):
        authenticate(AuthPolicy(secret), {"authorization": latin1}, b"", now=NOW, **GET)
    garbage = b"Bearer \xff\xfe".decode("utf-8", "surrogateescape")
    with pytest.raises(WebhookRequestError, match="bearer token is wrong"):
        authenticate(AuthPolicy(secret), {"authorization": garbage}, b"", now=NOW, **GET)


def test_no_secret_means_no_check() -> None:
    assert authenticate(AuthPolicy(None), {}, BODY, now=NOW, **GET) is None
    assert authenticate(AuthPolicy(""), {}, BODY, now=NOW, **GET) is None


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b'{"x": ' + b"[" * 65 + b"]" * 65 + b"}", "nested deeper than 64 levels (at $.x"),
        (b"[" * 100_000 + b"]" * 100_000, "nested deeper than 64 levels"),
        (b'{"ticket": "\\ud800"}', "lone surrogate escape at $.ticket"),
        (b'{"a": {"\\udc00": 1}}', "lone surrogate escape at $.a"),
        (b'{"a": ["ok", "\\udfff x"]}', "lone surrogate escape at $.a[1]"),
        (b'{"\\ud800": {"b": "\\ud800"}}', "lone surrogate escape at $"),
    ],
    ids=["deep", "far-too-deep", "surrogate", "surrogate-key", "surrogate-in-list", "in-path"],
)
def test_json_that_cannot_be_run_inputs_is_400_naming_where(body: bytes, words: str) -> None:
    hook = collect_hooks([plan_from(spec())])["/hooks/triage"]
    with pytest.raises(WebhookRequestError) as caught:
        hook_inputs(hook, body)
    assert caught.value.status == 400
    assert words in str(caught.value)
    str(caught.value).encode("utf-8")  # the message itself must be sendable


def test_json_at_the_depth_limit_and_surrogate_pairs_are_fine() -> None:
    hook = collect_hooks([plan_from(spec())])["/hooks/triage"]
    deep = b'{"x": ' + b"[" * 63 + b"]" * 63 + b"}"
    assert "x" in hook_inputs(hook, deep)
    assert hook_inputs(hook, b'{"ticket": "\\ud83d\\ude00"}')["ticket"] == "\U0001f600"


def test_brackets_and_escapes_inside_strings_are_not_nesting() -> None:
    hook = collect_hooks([plan_from(spec())])["/hooks/triage"]
    text = '[[{ \\" \\\\ ' * 100
    body = json.dumps({"ticket": text, "note": "\\ud83d\\ude00 and \\\\ud800 as text"}).encode()
    values = hook_inputs(hook, body)
    assert values["ticket"] == text and "\\ud800" in values["note"]
