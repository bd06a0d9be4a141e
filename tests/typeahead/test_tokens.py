"""tokenize: one tokenizer for names and queries; bounded, accent-free,
casefolded, any script's letters kept, never a NUL byte in a token."""

from __future__ import annotations

import random
import unicodedata

import pytest

from tasks.typeahead.tokens import (
    _TO_ASCII,
    MAX_INPUT_CHARS,
    MAX_TOKEN_CHARS,
    MAX_TOKENS,
    _tokenize_any,
    token_bytes,
    tokenize,
)


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("John Smith", ["john", "smith"]),
        ("  JOHN   smith ", ["john", "smith"]),
        ("Jean-Luc Picard", ["jean", "luc", "picard"]),
        ("smith,john", ["smith", "john"]),
        ("O'Brien", ["obrien"]),
        ("O’Brien", ["obrien"]),
        ("'quoted' names'", ["quoted", "names"]),  # not inside a word: a separator
        ("José Álvarez", ["jose", "alvarez"]),
        ("Søren Łukasz Ærø", ["soren", "lukasz", "aero"]),
        ("Straße", ["strasse"]),
        ("Ｊｏｈｎ ﬁsh", ["john", "fish"]),  # full-width letters and ligatures (NFKD)
        ("R2-D2 & C-3PO", ["r2", "d2", "c", "3po"]),
        ("王小明", ["王小明"]),
        ("Иван Петров", ["иван", "петров"]),
        ("Νίκος", ["νικοσ"]),
        ("john@example.com", ["john", "example", "com"]),
        ("smith john smith", ["smith", "john", "smith"]),  # repeats kept, in order
    ],
)
def test_examples(text: str, tokens: list[str]) -> None:
    assert tokenize(text) == tokens


@pytest.mark.parametrize("junk", ["", "   ", "!!!", "\x00\x00", "\u200b\u200d", "🙂🙂", "\ud800", "---''---", "\t\n\r"])
def test_junk_has_no_tokens(junk: str) -> None:
    assert tokenize(junk) == []


def test_nan_and_none_are_words_or_refused() -> None:
    assert tokenize("NaN None null") == ["nan", "none", "null"]
    with pytest.raises(TypeError):
        tokenize(float("nan"))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        tokenize(None)  # type: ignore[arg-type]


def test_bounds() -> None:
    assert tokenize("a" * 100) == ["a" * MAX_TOKEN_CHARS]
    many = " ".join(f"w{i}" for i in range(20))
    assert tokenize(many) == [f"w{i}" for i in range(MAX_TOKENS)]
    # Only the first MAX_INPUT_CHARS characters are read: a word after them is not seen.
    assert tokenize(" " * MAX_INPUT_CHARS + "late") == []
    assert tokenize("x" * 10_000 + " y") == ["x" * MAX_TOKEN_CHARS]
    full = [chr(ord("a") + i) * MAX_TOKEN_CHARS for i in range(MAX_TOKENS)]
    assert tokenize(" ".join(full)) == full  # the longest output reads back whole


def test_token_bytes() -> None:
    assert token_bytes("josé") == "josé".encode()
    assert token_bytes("王") == "王".encode()
    for bad in ["", "a\x00b"]:
        with pytest.raises(ValueError):
            token_bytes(bad)


def random_text(rng: random.Random) -> str:
    alphabet = "aAéÉøßæŁ' ’-,.\x00\t王Иοςİ①ﬁ🙂\u0301\u0915\u093e"  # includes combining and spacing marks
    return "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 400)))


def test_properties_on_random_text() -> None:
    rng = random.Random(3)
    for _ in range(2000):
        text = random_text(rng)
        tokens = tokenize(text)
        assert tokenize(" ".join(tokens)) == tokens  # idempotent on its own output
        assert len(tokens) <= MAX_TOKENS
        for token in tokens:
            assert 0 < len(token) <= MAX_TOKEN_CHARS
            assert b"\x00" not in token_bytes(token)


def test_the_ascii_shortcut_tokenizes_as_the_character_loop_does() -> None:
    # Names that are ASCII once accents are split off take a regex; every
    # other name the character loop. Both must give the same tokens, for
    # each code point alone, inside a word and after an apostrophe, and on
    # random mixes of the characters the rules treat differently.
    def by_loop(text: str) -> list[str]:
        return _tokenize_any(unicodedata.normalize("NFKD", text[:MAX_INPUT_CHARS].casefold()))

    # A code point the shortcut can take: it becomes ASCII once folded.
    shortcut = [c for c in map(chr, range(0x110000))
                if unicodedata.normalize("NFKD", c.casefold()).translate(_TO_ASCII).isascii()]
    assert len(shortcut) > 1000
    for char in shortcut:
        for text in (char, f"a{char}b", f"x'{char}y", f"{char}'z", f"é{char}"):
            assert tokenize(text) == by_loop(text), (hex(ord(char)), text)
    rng = random.Random(9)
    alphabet = "aAzZ09'` -_,.\x00\t’éÉøßæŁıİ①ﬁＡℌ\u0301\u0300\u036f\u0483王Иοςक\u093e🙂´"
    for _ in range(20_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 80)))
        assert tokenize(text) == by_loop(text), text
    assert tokenize("a" * 40 + "'" + "b" * 5) == ["a" * MAX_TOKEN_CHARS]
