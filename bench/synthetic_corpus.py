"""A synthetic parallel corpus shaped like WMT14 news text, grown from Multi30k.

Multi30k has 29,000 pairs and about 19,000 unique German words; repeating it would give a corpus
of millions of pairs with the same few words, which flatters every vocabulary learner and
tokenizer cache. Here each repetition of the corpus renames a random half of the word types of
each language with a new, pronounceable ending ("Mann" -> "Mannkeras"), so the number of unique
words keeps growing with the corpus size, as in news text, while sentence lengths and punctuation
stay those of real sentences. Seeded: the same size and seed always give the same files.

    python bench/synthetic_corpus.py --pairs 500000 --out /tmp/wmt_like
    # -> /tmp/wmt_like/train.de, /tmp/wmt_like/train.en (line-aligned)
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import time
from pathlib import Path

MULTI30K = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "multi30k"
SYLLABLES = tuple(
    consonant + vowel
    for consonant in "bdfgklmnprstvwz"
    for vowel in ("a", "e", "i", "o", "u", "ei", "au")
)
MUTATED_FRACTION = 0.5
_WORD = re.compile(r"\w+")


def ending(repetition: int, word_index: int) -> str:
    """A pronounceable suffix, unique to (repetition, word_index) for realistic corpus sizes."""
    number = repetition * 7919 + word_index
    syllables = []
    while True:
        number, digit = divmod(number, len(SYLLABLES))
        syllables.append(SYLLABLES[digit])
        if not number:
            return "".join(syllables)


def mutated_text(text: str, words: list[str], repetition: int, rng: random.Random) -> str:
    """`text` with a random `MUTATED_FRACTION` of the word types in `words` renamed."""
    chosen = rng.sample(range(len(words)), round(MUTATED_FRACTION * len(words)))
    renamed = {words[index]: words[index] + ending(repetition, index) for index in chosen}
    return _WORD.sub(lambda match: renamed.get(match.group(), match.group()), text)


def write_corpus(pairs: int, out: Path, *, source: str = "de", target: str = "en",
                 seed: int = 0) -> tuple[Path, Path]:
    """Writes `pairs` line-aligned pairs to `out/train.<source>` and `out/train.<target>`.

    Args:
        pairs: number of sentence pairs.
        out: output directory (created if missing).
        source: language code of the source side (a Multi30k file suffix).
        target: language code of the target side.
        seed: seeds which words each repetition renames.

    Returns:
        `(source_path, target_path)`.
    """
    out.mkdir(parents=True, exist_ok=True)
    texts = {language: (MULTI30K / f"train.{language}").read_text(encoding="utf-8")
             for language in (source, target)}
    lines_per_copy = texts[source].count("\n")
    vocabularies = {language: sorted(set(_WORD.findall(text)))
                    for language, text in texts.items()}
    paths = {language: out / f"train.{language}" for language in texts}
    rng = random.Random(seed)
    start = time.perf_counter()
    files = {language: path.open("w", encoding="utf-8") for language, path in paths.items()}
    try:
        written, repetition = 0, 0
        while written < pairs:
            count = min(lines_per_copy, pairs - written)
            for language, text in texts.items():
                copy = text if repetition == 0 else mutated_text(
                    text, vocabularies[language], repetition, rng
                )
                lines = copy.splitlines(keepends=True)[:count]
                files[language].writelines(lines)
            written += count
            repetition += 1
            print(f"\rsynthetic corpus: {written:,}/{pairs:,} pairs "
                  f"({time.perf_counter() - start:.0f} s)", end="", file=sys.stderr, flush=True)
    finally:
        for file in files.values():
            file.close()
    print(file=sys.stderr)
    return paths[source], paths[target]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=500_000)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for path in write_corpus(args.pairs, args.out, seed=args.seed):
        print(path)


if __name__ == "__main__":
    main()
