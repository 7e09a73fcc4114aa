"""Webhook triggers, the parts that decide: which hook, which inputs, which run id, whether
a request is authentic. Pure: no server (tests/workflows/test_webhooks.py has those)."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from armature_temporal.service.webhooks import (
    WebhookConfigError,
    WebhookRequestError,
    authenticate,
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
GOOD_SIG = "sha256=" + hmac.new(SECRET.encode(), BODY, hashlib.sha256).hexdigest()


@pytest.mark.parametrize(
    "headers",
    [
        {"authorization": f"Bearer {SECRET}"},
        {"authorization": f"bearer {SECRET}"},
        {"x-armature-signature-256": GOOD_SIG},
        {"x-hub-signature-256": GOOD_SIG.upper().replace("SHA256=", "sha256=")},
    ],
    ids=["bearer", "bearer-lower", "hmac", "github-hmac"],
)
def test_the_secret_admits_a_bearer_token_or_a_body_signature(headers: dict[str, str]) -> None:
    authenticate(SECRET, headers, BODY)


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"authorization": "Bearer wrong"},
        {"authorization": f"Basic {SECRET}"},
        {"x-armature-signature-256": GOOD_SIG[:-1] + "0"},
        {"x-armature-signature-256": "sha256=" + hmac.new(b"other", BODY, "sha256").hexdigest()},
        {"authorization": "Bearer s3cr\u00e9t"},
        {"x-hub-signature-256": "sha256=\u00e9"},
    ],
    ids=[
        "none",
        "wrong-token",
        "wrong-scheme",
        "tampered-sig",
        "other-key",
        "non-ascii",
        "non-ascii-sig",
    ],
)
def test_anything_else_is_401_saying_what_to_send(headers: dict[str, str]) -> None:
    with pytest.raises(WebhookRequestError, match="Authorization: Bearer") as caught:
        authenticate(SECRET, headers, BODY)
    assert caught.value.status == 401
    assert SECRET not in str(caught.value)


def test_a_signature_covers_the_body() -> None:
    with pytest.raises(WebhookRequestError):
        authenticate(SECRET, {"x-armature-signature-256": GOOD_SIG}, BODY + b" ")


def test_no_secret_means_no_check() -> None:
    authenticate(None, {}, BODY)
    authenticate("", {}, BODY)
