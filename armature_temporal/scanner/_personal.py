"""Personal data: e-mail addresses, phone numbers, payment cards, IBANs, US SSNs, public IPs.

Each pattern is checked before it counts: card numbers pass the Luhn check, IBANs the
ISO 13616 mod-97 check, IPv4 addresses must be public (``ipaddress.is_global``), and
documentation addresses (``example.com``, ``.test``, …) are placeholders, not data.
"""

from __future__ import annotations

import ipaddress
import re

from armature_temporal.scanner._rules import Rule

__all__ = ["PERSONAL_RULES"]

_PLACEHOLDER_DOMAINS = re.compile(
    r"@(?:[\w-]+\.)*(?:example\.(?:com|org|net)|[\w-]+\.(?:test|invalid|example|localhost)"
    r"|domain\.(?:com|tld)|email\.com|yourdomain\.\w+|company\.com)$",
    re.IGNORECASE,
)


def _email_ok(m: re.Match[str]) -> bool:
    return _PLACEHOLDER_DOMAINS.search(m.group()) is None


def _luhn_ok(m: re.Match[str]) -> bool:
    digits = [int(c) for c in m.group() if c.isdigit()]
    if not 13 <= len(digits) <= 19 or len(set(digits)) < 3:
        return False
    total = 0
    for i, d in enumerate(reversed(digits)):
        if i % 2:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def _iban_ok(m: re.Match[str]) -> bool:
    s = m.group().replace(" ", "").upper()
    if not 15 <= len(s) <= 34:
        return False
    rearranged = s[4:] + s[:4]
    number = "".join(str(int(c, 36)) for c in rearranged)
    return int(number) % 97 == 1


def _public_ip(m: re.Match[str]) -> bool:
    text = m.group()
    if any(len(part) > 1 and part.startswith("0") for part in text.split(".")):
        return False  # 1.2.3.04 is not how anyone writes an address
    try:
        return ipaddress.IPv4Address(text).is_global
    except ipaddress.AddressValueError:
        return False


def _phone_digits_ok(m: re.Match[str]) -> bool:
    n = sum(c.isdigit() for c in m.group())
    return 9 <= n <= 15


PERSONAL_RULES: tuple[Rule, ...] = (
    Rule(
        "email-address",
        "personal_data",
        re.compile(
            r"(?<![\w.+-])[A-Za-z0-9][A-Za-z0-9._%+-]{0,63}@[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}"
            r"[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}[A-Za-z0-9])?)*\.[A-Za-z]{2,24}"
            r"(?![\w-])"
        ),
        0.9,
        check=_email_ok,
    ),
    Rule(
        "payment-card",
        "personal_data",
        re.compile(r"(?<![\d-])(?:[3-6]\d{3})(?:[ -]?\d{2,4}){3,4}(?![\d-])"),
        0.9,
        check=_luhn_ok,
    ),
    Rule(
        "iban",
        "personal_data",
        re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?\b"),
        0.9,
        check=_iban_ok,
    ),
    Rule(
        "us-ssn",
        "personal_data",
        re.compile(r"(?<![\w-])(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}(?![\w-])"),
        0.7,
    ),
    Rule(
        "phone-number",
        "personal_data",
        re.compile(
            r"(?<![\w+.-])(?:\+\d{1,3}[ .-]?(?:\(\d{1,4}\)[ .-]?)?\d{1,4}(?:[ .-]\d{2,5}){1,4}"
            r"|\(\d{3}\)[ .-]?\d{3}[ .-]\d{4}|\d{3}[.-]\d{3}[.-]\d{4})(?![\w.-]*\d)"
        ),
        0.75,
        check=_phone_digits_ok,
    ),
    Rule(
        "public-ipv4",
        "personal_data",
        re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w]|\.\d)"),
        0.6,
        check=_public_ip,
    ),
)
