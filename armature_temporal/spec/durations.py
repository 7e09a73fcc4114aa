"""Human durations in specs: ``90``, ``"90s"``, ``"30m"``, ``"1h30m"``, ``"2d"``, ``"1w"``."""

from __future__ import annotations

import re

__all__ = ["format_duration", "parse_duration"]

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")


def parse_duration(value: object) -> float:
    """Parse a duration to seconds.

    Args:
        value: A non-negative number of seconds, or a string of number+unit parts
            (units ms, s, m, h, d, w), e.g. ``"1h30m"``.

    Returns:
        The duration in seconds.

    Raises:
        ValueError: With the value and the accepted forms.
    """
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration; write seconds (90) or e.g. '30m', '2d'")
    if isinstance(value, int | float):
        if value < 0 or value != value:
            raise ValueError(f"duration {value!r} must be a non-negative number of seconds")
        return float(value)
    if isinstance(value, str):
        text = value.strip().replace(" ", "")
        if text and _PART.sub("", text) == "":
            return sum(float(n) * _UNITS[u] for n, u in _PART.findall(text))
        try:
            seconds = float(text)
        except ValueError:
            pass
        else:
            if seconds >= 0:
                return seconds
    raise ValueError(
        f"{value!r} is not a duration; write seconds (90) or number+unit parts such as "
        "'90s', '30m', '1h30m', '2d' (units: ms, s, m, h, d, w)"
    )


def format_duration(seconds: float) -> str:
    """Format seconds compactly (``5400`` → ``"1h30m"``)."""
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    out = []
    rest = int(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if rest >= size:
            out.append(f"{rest // size}{unit}")
            rest %= size
    return "".join(out) or "0s"
