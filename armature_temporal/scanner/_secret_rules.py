"""The secret detectors: provider key formats, credential slots and key-like assignments.

Each :class:`SecretRule` names the group ``v`` (or ``w``, ``q``, ``u``) that holds the value;
``kind`` says which check in :mod:`._secrets` the value must then pass. Formats follow the
providers' published token layouts (prefix, alphabet, length).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

__all__ = ["KNOWN_PUBLIC_KEYS", "SECRET_RULES", "Kind", "SecretRule"]

Kind = Literal["token", "keylike", "credential", "assignment", "jwt", "pem"]

_B0 = r"(?<![A-Za-z0-9_-])"
_B1 = r"(?![A-Za-z0-9_-])"


KNOWN_PUBLIC_KEYS: frozenset[str] = frozenset(
    {
        # Google API keys committed to https://github.com/firebase/firebase-android-sdk (sample
        # and test apps), so public by publication. gitleaks allow-lists exactly these values
        # for its gcp-api-key rule ("example keys from …firebase-android-sdk", in
        # cmd/generate/config/rules/gcp.go, gitleaks/gitleaks commit 0073de5a). Matched by
        # exact value only: any other AIza… key is still reported.
        "AIzaSyabcdefghijklmnopqrstuvwxyz1234567",
        "AIzaSyAnLA7NfeLquW1tJFpx_eQCxoX-oo6YyIs",
        "AIzaSyCkEhVjf3pduRDt6d1yKOMitrUEke8agEM",
        "AIzaSyDMAScliyLx7F0NPDEJi1QmyCgHIAODrlU",
        "AIzaSyD3asb-2pEZVqMkmL6M9N6nHZRR_znhrh0",
        "AIzayDNSXIbFmlXbIE6mCzDLQAqITYefhixbX4A",
        "AIzaSyAdOS2zB6NCsk1pCdZ4-P6GBdi_UUPwX7c",
        "AIzaSyASWm6HmTMdYWpgMnjRBjxcQ9CKctWmLd4",
        "AIzaSyANUvH9H9BsUccjsu2pCmEkOPjjaXeDQgY",
        "AIzaSyA5_iVawFQ8ABuTZNUdcwERLJv_a_p4wtM",
        "AIzaSyA4UrcGxgwQFTfaI3no3t7Lt1sjmdnP5sQ",
        "AIzaSyDSb51JiIcB6OJpwwMicseKRhhrOq1cS7g",
        "AIzaSyBF2RrAIm4a0mO64EShQfqfd2AFnzAvvuU",
        "AIzaSyBcE-OOIbhjyR83gm4r2MFCu4MJmprNXsw",
        "AIzaSyB8qGxt4ec15vitgn44duC5ucxaOi4FmqE",
        "AIzaSyA8vmApnrHNFE0bApF4hoZ11srVL_n0nvY",
        # The search-only Algolia key of the public npm-search index, shipped in yarn and
        # other npm front ends; a stop word of gitleaks' generic-api-key rule
        # (cmd/generate/config/rules/generic.go, citing yarnpkg/berry issue 6201).
        "6fe4476ee5a1832882e326b506d14126",
    }
)
"""Key values published as public (SDK samples, search-only keys in shipped clients) and
allow-listed by exact value in gitleaks' own rules; they are not reported. Only values a
scanner project documents as public belong here, never values seen in a data set."""


@dataclass(frozen=True)
class SecretRule:
    """A secret detector: ``pattern``'s group ``v`` (or the whole match) is the value."""

    name: str
    pattern: re.Pattern[str]
    kind: Kind
    score: float = 0.95


def _tok(name: str, body: str, score: float = 0.95, flags: int = 0) -> SecretRule:
    return SecretRule(name, re.compile(_B0 + "(?P<v>" + body + ")" + _B1, flags), "token", score)


SECRET_RULES: tuple[SecretRule, ...] = (
    # --- provider formats ------------------------------------------------------------------
    _tok(
        "openai-api-key",
        r"sk-(?:(?:proj|svcacct|admin)-)?[A-Za-z0-9_-]{20,200}T3BlbkFJ"
        r"[A-Za-z0-9_-]{20,200}",
    ),
    _tok("anthropic-api-key", r"sk-ant-(?:api|admin)\d\d-[A-Za-z0-9_-]{93}AA"),
    # A bare ``sk-`` key without the T3BlbkFJ marker (OpenAI project, service-account, admin
    # and legacy keys, and the many providers with OpenAI-compatible APIs that copied the
    # shape: DeepSeek's ``sk-`` + 32 hex, ...). No keyword is needed before it; the value must
    # look random (see ``_keylike_reason``). Below the exact formats, which win on overlap.
    SecretRule(
        "openai-style-key",
        re.compile(
            # not sk-ant-: Anthropic's exact format (above) decides those, wrong shapes included
            _B0 + r"(?P<v>sk-(?!ant-)(?:(?:proj|svcacct|admin|None)-)?[A-Za-z0-9_-]{32,250})" + _B1
        ),
        "keylike",
        0.85,
    ),
    _tok("github-token", r"gh[pousr]_[A-Za-z0-9]{36}|github_pat_[A-Za-z0-9]{22}_[A-Za-z0-9]{59}"),
    _tok(
        "gitlab-token",
        r"(?:glpat|gldt|glft|glsoat|glrt)-[A-Za-z0-9_-]{20,50}(?<!_)"
        r"|GR1348941[A-Za-z0-9_-]{20,50}(?<!_)|glcbt-(?:[0-9a-fA-F]{2}_)?[A-Za-z0-9_-]{20,50}"
        r"|glimt-[A-Za-z0-9_-]{25}|glptt-[A-Za-z0-9_-]{40}|glagent-[A-Za-z0-9_-]{50,1024}"
        r"|gloas-[A-Za-z0-9_-]{64}",
    ),
    _tok("aws-access-key-id", r"(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16}"),
    _tok(
        "aws-bedrock-api-key",
        r"ABSK[A-Za-z0-9+/]{109,269}={0,2}"
        r"|bedrock-api-key-YmVkcm9jay5hbWF6b25hd3MuY29t[A-Za-z0-9+/=]{20,}",
    ),
    _tok("google-api-key", r"AIza[0-9A-Za-z_-]{35}", 0.9),
    _tok(
        "slack-token",
        r"xox[baprs]-(?:\d{10,13}-){1,3}[A-Za-z0-9]{24,64}"
        r"|xoxe\.xox[bp]-1-[A-Za-z0-9]{163,166}|xoxe-1-[A-Za-z0-9]{145,150}",
    ),
    _tok("stripe-secret-key", r"(?:sk|rk)_(?:live|test|prod)_[A-Za-z0-9]{20,247}"),
    _tok("huggingface-token", r"hf_[A-Za-z]{34}|api_org_[A-Za-z]{34}"),
    _tok("npm-token", r"npm_[A-Za-z0-9]{36}"),
    _tok("pypi-token", r"pypi-AgE(?:IcHlwaS5vcmc|NdGVzdC5weXBpLm9yZw)[A-Za-z0-9_-]{70,}"),
    _tok("sendgrid-api-key", r"SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}"),
    _tok("mailchimp-api-key", r"[0-9a-f]{32}-us\d{1,2}", 0.9),
    _tok("mailgun-api-key", r"key-[0-9a-f]{32}", 0.85),
    _tok("twilio-key", r"(?:SK|AC)[0-9a-fA-F]{32}", 0.85),
    _tok("telegram-bot-token", r"\d{8,10}:AA[0-9A-Za-z_-]{32,33}"),
    _tok("discord-bot-token", r"[MNO][A-Za-z0-9_-]{23,25}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,38}"),
    _tok("azure-ad-client-secret", r"[A-Za-z0-9_~.]{3}\dQ~[A-Za-z0-9_~.-]{31,34}"),
    _tok("facebook-token", r"EAA[MC][A-Za-z0-9]{100,}|\d{15,16}\|[A-Za-z0-9_-]{27}", 0.9),
    _tok("vault-token", r"hvs\.[A-Za-z0-9_-]{90,}|hvb\.[A-Za-z0-9_-]{138,}"),
    _tok(
        "vault-legacy-token",
        r"s\.(?=[A-Za-z0-9]*\d)(?=[A-Za-z0-9]*[a-z])(?=[A-Za-z0-9]*[A-Z])"
        r"[A-Za-z0-9]{24}",
        0.8,
    ),
    _tok("notion-token", r"ntn_\d{11}[A-Za-z0-9]{35}"),
    _tok("sourcegraph-token", r"sgp_(?:[a-fA-F0-9]{16}|local)_[a-fA-F0-9]{40}|sgp_[a-fA-F0-9]{40}"),
    _tok("databricks-token", r"dapi[a-f0-9]{32}(?:-\d)?"),
    _tok("octopus-api-key", r"API-[A-Z0-9]{26}"),
    _tok("grafana-token", r"glc_[A-Za-z0-9+/]{32,400}={0,2}|glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}"),
    _tok(
        "misc-prefixed-token",
        r"pplx-[A-Za-z0-9]{48}|pnu_[A-Za-z0-9]{36}|rdme_[a-z0-9]{70}|fo1_[A-Za-z0-9_-]{43}"
        r"|sntryu_[a-f0-9]{64}|sntrys_eyJ[A-Za-z0-9+/=_-]{100,}|pul-[a-f0-9]{40}"
        r"|dp\.(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9]{40,44}|shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}"
        r"|lin_api_[A-Za-z0-9]{40}|PMAK-[a-f0-9]{24}-[a-f0-9]{34}|ATATT3[A-Za-z0-9_=-]{186}"
        r"|xkeysib-[a-f0-9]{64}-[A-Za-z0-9]{16}|do[por]_v1_[a-f0-9]{64}"
        r"|sq0(?:atp|csp)-[A-Za-z0-9_-]{22,43}|EAAA[A-Za-z0-9_-]{60}|LTAI[A-Za-z0-9]{20}"
        r"|p8e-[A-Za-z0-9]{32}|s-s4t2(?:ud|af)-[a-f0-9]{64}|ops_eyJ[A-Za-z0-9+/]{250,}={0,3}"
        r"|sm_(?:pat|aat|sat)_[A-Za-z0-9]{16}|AKCp[A-Za-z0-9]{69}|cmVmd[A-Za-z0-9]{59}"
        r"|pscale_(?:tkn|oauth|pw)_[A-Za-z0-9_.-]{32,64}|dckr_pat_[A-Za-z0-9_-]{27}"
        r"|tfp?_?[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=-]{60,70}|glsa_[A-Za-z0-9]{32}_[a-f0-9]{8}",
    ),
    SecretRule(
        "private-key",
        re.compile(
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----(?P<v>[\s\S]{0,8000}?)"
            r"-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
        ),
        "pem",
    ),
    SecretRule(
        "jwt",
        re.compile(
            _B0 + r"(?P<v>eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}(?:\.[A-Za-z0-9_-]{8,})?)"
            r"(?![A-Za-z0-9_.-])"
        ),
        "jwt",
        0.9,
    ),
    SecretRule(
        "gcp-service-account",
        re.compile(r"\"type\"\s*:\s*\"(?P<v>service_account)\""),
        "credential",
        0.7,
    ),
    # --- credentials in places that only hold credentials -----------------------------------
    SecretRule(
        "url-credentials",
        re.compile(
            r"\b[a-z][a-z0-9+.-]{1,20}://[^\s:/@\"'<>;]{1,100}:(?P<v>[^\s/@\"'<>;]{1,200})"
            r"@[A-Za-z0-9.-]+",
            re.IGNORECASE,
        ),
        "credential",
        0.9,
    ),
    SecretRule(
        "curl-user",
        re.compile(r"\bcurl\b(?:[^\n]|\\\n)*?\s(?:-u|--user)\s+(?P<v>\S+)"),
        "credential",
        0.9,
    ),
    SecretRule(
        "authorization-header",
        re.compile(
            r"\b(?:Proxy-)?Authorization\s*[:=]\s*(?:(?!Basic\b)[A-Za-z][A-Za-z-]{1,20}\s+)?"
            r"(?P<v>[A-Za-z0-9._~+/=:@!$-]{8,})"
            r"|(?<![\w-])(?:X-[A-Za-z-]{0,30}?)?(?:Api-?Key|Api-Token|Auth-Token|Access-Token|Private-Token|JFrog-Art-Api"
            r"|Token)\s*:\s*(?P<w>[A-Za-z0-9._~+/=-]{8,})",
            re.IGNORECASE,
        ),
        "credential",
        0.85,
    ),
    SecretRule(
        "basic-auth-header",
        re.compile(r"\bAuthorization\s*:\s*Basic\s+(?P<v>[A-Za-z0-9+/]{4,}={0,2})(?![.\w])"),
        "credential",
        0.85,
    ),
    SecretRule(
        "npmrc-auth-token",
        re.compile(r"//[^\s/]+/(?:[^\s:]*/)?:_(?:authToken|password|auth)\s*=\s*(?P<v>\S+)"),
        "credential",
        0.9,
    ),
    SecretRule(
        "azure-storage-key",
        re.compile(r"\bAccountKey\s*=\s*(?P<v>[A-Za-z0-9+/]{86}==)"),
        "credential",
        0.95,
    ),
    SecretRule(
        "webhook-url",
        re.compile(
            r"(?P<v>(?:https?://)?hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/+-]*"
            r"|https://[A-Za-z0-9.-]+\.webhook\.office\.com/webhookb2/[A-Za-z0-9@/_-]*"
            r"|https://discord(?:app)?\.com/api/webhooks/\d+/[A-Za-z0-9_-]+)"
        ),
        "credential",
        0.8,
    ),
    # --- a key-like name assigned a random-looking value ------------------------------------
    SecretRule(
        "secret-assignment",
        re.compile(
            r"(?P<name>[A-Za-z0-9_.-]{0,40}?(?:(?<![A-Za-z0-9])|(?<=[a-z0-9])(?=[A-Z]))"
            r"(?i:secret|passw(?:or)?d|passwd|pwd|token|api[_.-]?key|apikey|access[_.-]?key"
            r"|auth[_.-]?key|private[_.-]?key|credential|client[_.-]?secret|signing[_.-]?key"
            r"|encryption[_.-]?key|master[_.-]?key|bearer)"
            r"(?:s|[_.-][A-Za-z0-9_.-]{0,20}|[A-Z][A-Za-z0-9_.-]{0,20})?)"
            r"[\"']?[ \t]*(?::=|=>|->|=|:)[ \t]*(?:[\"'`](?P<q>[^\"'`\s]{6,200})[\"'`]"
            r"|(?P<u>[^\s\"'`,;)\]}=]{6,200}={0,2})(?![^\s\"'`,;)\]}]))"
        ),
        "assignment",
        0.85,
    ),
)
