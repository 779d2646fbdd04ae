"""Config values written as TOML: a stored config, a ``--set key=value`` item."""

from __future__ import annotations

import json
from typing import Any


def toml_string(s: str) -> str:
    """``s`` as a TOML basic string, for building ``--set key=value`` items: every
    character as given, a newline or another control character escaped (JSON's escapes
    are TOML's)."""
    return json.dumps(s, ensure_ascii=False).replace("\x7f", "\\u007f")


def toml_value(value: Any) -> str:
    """``value`` (a config value: bool, string, number, table or list) as TOML."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):  # always finite: validate() refuses inf and nan
        return repr(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {type(value).__name__}")
