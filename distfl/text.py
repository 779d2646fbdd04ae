"""Text that comes from outside distfl (a run file's attributes and names, a path) as it
is printed: a control character is written as its escape (``\\x1b``, ``\\n``), so that
what a file holds cannot move the cursor, recolour or retitle a terminal, reorder what is
shown, or break a line in two."""

from __future__ import annotations

import unicodedata

#: the escapes of the control characters that have a short one
SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
#: besides Unicode's control characters (Cc: C0, DEL, C1): the line and paragraph
#: separators and the bidirectional controls, which reorder the text around them
ALSO = set("\u2028\u2029\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def printable(text: object) -> str:
    """``str(text)`` with every control character escaped (:data:`SHORT`, else
    ``\\xNN`` or ``\\uNNNN``), and so a lone surrogate (a file name's byte that is not
    UTF-8); everything else, a backslash included, as it is."""
    out = []
    for ch in str(text):
        if ch in ALSO or unicodedata.category(ch) in ("Cc", "Cs"):
            code = ord(ch)
            out.append(SHORT.get(ch) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"))
        else:
            out.append(ch)
    return "".join(out)


def exception_line(exc: BaseException) -> str:
    """An exception in one line: its type and its message's first line (``RuntimeError:
    the disk went away``; the type alone when it says nothing)."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


__all__ = ["exception_line", "printable"]
