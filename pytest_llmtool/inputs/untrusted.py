"""Text from files we do not control: their encoding, characters that would play tricks on a
terminal, and how much of it an error message may echo back.

Datasets and scenarios are often written by others; a defect in one must become a precise
error on that input, never a crash of the session or a page of someone else's bytes.
"""

from __future__ import annotations

import unicodedata

# Longest error message we print for one problem: validators echo the offending value.
MAX_MESSAGE = 400

# Byte-order marks of the encodings a text editor may save in instead of UTF-8.
_BOMS = (
    (b"\xff\xfe\x00\x00", "UTF-32 (little-endian)", "utf-32"),
    (b"\x00\x00\xfe\xff", "UTF-32 (big-endian)", "utf-32"),
    (b"\xff\xfe", "UTF-16 (little-endian)", "utf-16"),
    (b"\xfe\xff", "UTF-16 (big-endian)", "utf-16"),
)


def shorten(text: str, limit: int = MAX_MESSAGE) -> str:
    """`text`, cut to `limit` characters with a note of how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit} more characters)"


def nonprinting(text: str) -> str | None:
    """Why `text` may not be shown raw on a terminal (a control, format or bidi character,
    a line break, an unusual space), or None when it may."""
    if text.isprintable():
        return None
    index, char = next((i, c) for i, c in enumerate(text) if not c.isprintable())
    code = f"U+{ord(char):04X} {unicodedata.name(char, '')}".rstrip()
    return f"contains the non-printing character {char!r} ({code}) at position {index + 1}"


def escaped(text: str) -> str:
    """`text` on one line as it reads: each non-printing character (a line break, a tab, a
    control or format character, an unusual space) as its Python escape (`\\n`, `\\t`,
    `\\x1b`, `\\u200b`), so a multi-line check argument neither breaks a table nor loses its
    line breaks to a renderer that joins lines. Text that needs no escape is returned as it
    is (a regex's `\\d` stays); in text that does, a backslash is doubled too, so `\\n` there
    always means a line break."""
    if text.isprintable():
        return text
    return "".join("\\\\" if c == "\\" else c if c.isprintable() else repr(c)[1:-1] for c in text)


def wide_encoding(head: bytes) -> tuple[str, str] | None:
    """(label, codec) when a file's first bytes show UTF-16 or UTF-32 text: by its byte-order
    mark, else by the NUL pattern ASCII text has in those encodings (as RFC 4627 detects JSON's)."""
    for bom, label, codec in _BOMS:
        if head.startswith(bom):
            return label, codec
    if len(head) < 4 or 0 not in head[:4]:
        return None
    nul = [b == 0 for b in head[:4]]
    patterns = {
        (False, True, True, True): ("UTF-32 (little-endian)", "utf-32-le"),
        (True, True, True, False): ("UTF-32 (big-endian)", "utf-32-be"),
        (False, True, False, True): ("UTF-16 (little-endian)", "utf-16-le"),
        (True, False, True, False): ("UTF-16 (big-endian)", "utf-16-be"),
    }
    return patterns.get((nul[0], nul[1], nul[2], nul[3]))


def undecodable(raw: bytes, error: UnicodeDecodeError) -> tuple[int, str]:
    """The 1-based line of the first byte that is not UTF-8, and what to say about it."""
    start = error.start
    line_start = raw.rfind(b"\n", 0, start) + 1
    column = len(raw[line_start:start].decode("utf-8", "replace")) + 1
    return raw.count(b"\n", 0, start) + 1, f"not UTF-8 (byte 0x{raw[start]:02x} at column {column})"
