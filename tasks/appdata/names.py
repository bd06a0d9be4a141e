"""Plausible people's names for generated users: first names, sometimes a
middle one, and last names, with accents and several scripts' spellings, so
the typeahead's tokenizer and ranking meet what real names look like."""

from __future__ import annotations

import random

FIRST = (
    "Ana", "Ben", "Chloé", "David", "Elif", "François", "Grace", "Hiro", "Isabel", "Jack", "John", "Johanna",
    "Jon", "José", "Karl", "Léa", "Liam", "Łukasz", "Maria", "Mei", "Noah", "Olivia", "Priya", "Renée",
    "Sam", "Søren", "Tom", "Uma", "Victor", "Wei", "Xavier", "Yara", "Zoë", "Björn", "Camille", "Diego",
)
MIDDLE = ("Michael", "Anne", "Lee", "Marie", "James", "Rose", "Paul")
LAST = (
    "Smith", "Álvarez", "Brown", "Chen", "Dubois", "Eriksson", "García", "Hansen", "Ito", "Jones", "Kowalski",
    "Lopez", "Müller", "Nguyen", "O'Brien", "Patel", "Quinn", "Rossi", "Schmidt", "Tanaka", "Ueda", "Vega",
    "Williams", "Xu", "Yilmaz", "Zhang", "Smith-Jones", "Martin", "Novak", "Ferreira",
)


def person_name(rng: random.Random) -> str:
    first, last = rng.choice(FIRST), rng.choice(LAST)
    if rng.random() < 0.15:
        return f"{first} {rng.choice(MIDDLE)} {last}"
    return f"{first} {last}"
