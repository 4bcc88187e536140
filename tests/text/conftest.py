"""Fixtures of the text tests: a small hand-written English-German corpus and its tokenizers."""

import pytest

from keras_transformer.text.data import ParallelCorpus
from keras_transformer.text.vocabulary import build_tokenizers

# Written for these tests in the style of Multi30k, with the punctuation that detokenization
# must put back: apostrophes, quotes, brackets, hyphens, slashes, decimals, suspended compounds.
PAIRS = (
    ("A man in a blue shirt is riding a bicycle.", "Ein Mann in einem blauen Hemd fährt Fahrrad."),
    ("Two dogs play in the snow, and a child watches.",
     "Zwei Hunde spielen im Schnee, und ein Kind schaut zu."),
    ("A woman's red umbrella is open.", "Der rote Regenschirm einer Frau ist offen."),
    ("The children aren't wearing T-shirts.", "Die Kinder tragen keine T-Shirts."),
    ('A sign says "Free Coffee" in big letters.',
     "Auf einem Schild steht „Kostenloser Kaffee“ in großen Buchstaben."),
    ("A boy (about 5 years old) jumps into the pool!",
     "Ein Junge (etwa 5 Jahre alt) springt in den Pool!"),
    ("The ladies' team celebrates with 3.5 liters of juice.",
     "Die Damenmannschaft feiert mit 3,5 Litern Saft."),
    ("Is the man on the left holding a drink?", "Hält der Mann links ein Getränk?"),
    ("A street performer juggles; people watch.",
     "Ein Straßenkünstler jongliert; Leute schauen zu."),
    ("A man and/or a woman stand at the bus stop.",
     "Ein Mann und/oder eine Frau stehen an der Bushaltestelle."),
    ("A dining and living room with big windows.", "Ein Ess- und Wohnzimmer mit großen Fenstern."),
    ("A girl eats at McDonald's.", "Ein Mädchen isst bei McDonald's."),
    ("Three men are working on a roof at 10:30.", "Drei Männer arbeiten um 10:30 auf einem Dach."),
    ("A dog jumps over a 'Keep Out' sign.",
     "Ein Hund springt über ein Schild mit „Betreten verboten“."),
)


@pytest.fixture(scope="session")
def corpus() -> ParallelCorpus:
    return ParallelCorpus([en for en, _ in PAIRS], [de for _, de in PAIRS])


@pytest.fixture(scope="session")
def tokenizer_directory(tmp_path_factory):
    return tmp_path_factory.mktemp("tokenizers")


@pytest.fixture(scope="session")
def tokenizers(corpus, tokenizer_directory):
    """English and German tokenizers learned from `corpus` (every character is in vocabulary)."""
    return build_tokenizers(
        corpus, tokenizer_directory, vocab_size=400, min_count=1, source_name="en",
        target_name="de",
    )
