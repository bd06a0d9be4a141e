"""The one tokenizer of the typeahead: contact names when they are indexed,
and queries when they are looked up, so both always agree.

A token is a run of letters and digits of any script, casefolded, without
accents. Tokens are the byte prefixes of the index's column qualifiers and
row keys (``token_bytes``), where b"\\x00" separates a token from what
follows it: a token never contains it.
"""

from __future__ import annotations

import re
import unicodedata

MAX_TOKEN_CHARS = 32
MAX_TOKENS = 8
# Enough for MAX_TOKENS full tokens and their separators, so that
# tokenize(" ".join(tokenize(text))) == tokenize(text) for every text.
MAX_INPUT_CHARS = MAX_TOKENS * (MAX_TOKEN_CHARS + 1)

# Letters NFKD does not decompose into a base letter and a mark: what a
# person types on a keyboard without them (after casefold, so lower case).
_LOOKALIKES = str.maketrans({
    "ø": "o", "ł": "l", "æ": "ae", "œ": "oe", "đ": "d", "ð": "d", "þ": "th", "ħ": "h", "ŧ": "t", "ı": "i",
})
# Inside a word they are dropped ("O'Brien" is one token); elsewhere they separate.
_APOSTROPHES = frozenset("'’‘ʼ`´")
_MARKS_DROPPED = frozenset({"Mn", "Me"})  # accents; spacing marks (Mc) are vowels of Indic scripts: kept
# Most names are ASCII once NFKD has split their accents off (the block
# U+0300..U+036F, all of it Mn) and the look-alikes are replaced: such a
# name takes one regex instead of a loop over its characters. The regex is
# the loop's rules restricted to ASCII: letters and digits (NFKD can make
# capitals: they stay, as in the loop), an apostrophe kept out of a word it
# sits inside.
_TO_ASCII = {**dict.fromkeys(range(0x300, 0x370)), **_LOOKALIKES}
_ASCII_WORD = re.compile(r"[A-Za-z0-9]+(?:['`][A-Za-z0-9]+)*")
_ASCII_TOKEN = re.compile(rf"([A-Za-z0-9]{{1,{MAX_TOKEN_CHARS}}})[A-Za-z0-9]*")  # no apostrophe: cut as found


def tokenize(text: str) -> list[str]:
    """The tokens of a name or a query, in order, repeats kept (the ranking
    needs positions; the index keeps one entry per distinct token).

    Bounded: only the first ``MAX_INPUT_CHARS`` (264) characters are read,
    each token is cut to ``MAX_TOKEN_CHARS`` (32) characters and at most
    ``MAX_TOKENS`` (8) tokens are returned; a longer name is found by its
    first eight tokens.

    >>> tokenize("José O'Brien-Łukasz, SMITH")
    ['jose', 'obrien', 'lukasz', 'smith']
    """
    if not isinstance(text, str):
        raise TypeError(f"tokenize takes a str, got {type(text).__name__}")
    folded = unicodedata.normalize("NFKD", text[:MAX_INPUT_CHARS].casefold())
    plain = folded if folded.isascii() else folded.translate(_TO_ASCII)
    if plain.isascii():
        if "'" not in plain and "`" not in plain:
            return _ASCII_TOKEN.findall(plain)[:MAX_TOKENS]
        words = _ASCII_WORD.findall(plain)[:MAX_TOKENS]
        return [w.replace("'", "").replace("`", "")[:MAX_TOKEN_CHARS] for w in words]
    return _tokenize_any(folded)


def _tokenize_any(folded: str) -> list[str]:
    """``tokenize`` of any casefolded NFKD text, character by character."""
    chars = [c for c in folded if unicodedata.category(c) not in _MARKS_DROPPED]
    plain = "".join(chars).translate(_LOOKALIKES)
    tokens: list[str] = []
    current: list[str] = []
    for i, char in enumerate(plain):
        if _is_word_char(char):
            current.append(char)
        elif char in _APOSTROPHES and current and i + 1 < len(plain) and _is_word_char(plain[i + 1]):
            continue  # inside a word: "o'brien" -> "obrien"
        elif current:
            tokens.append("".join(current[:MAX_TOKEN_CHARS]))
            current = []
            if len(tokens) == MAX_TOKENS:
                return tokens
    if current:
        tokens.append("".join(current[:MAX_TOKEN_CHARS]))
    return tokens[:MAX_TOKENS]


def token_bytes(token: str) -> bytes:
    """A token as the index stores it: UTF-8, never empty, never holding
    b"\\x00" (UTF-8 writes that byte only for U+0000, which is no letter)."""
    if not token or "\x00" in token:
        raise ValueError(f"not a token: {token[:40]!r}")
    return token.encode("utf-8")


def _is_word_char(char: str) -> bool:
    return char.isalnum() or unicodedata.category(char) == "Mc"
