"""Text side: WordPiece tokenizers (tensorflow-text), corpora, `tf.data` pipelines, demo data."""

from keras_transformer.text.data import (
    DataError,
    ParallelCorpus,
    make_dataset,
    padding_fraction,
    read_parallel_files,
    read_tsv,
)
from keras_transformer.text.demo_data import (
    demo_vocabularies,
    english_number,
    german_number,
    make_demo_corpus,
    write_demo_files,
)
from keras_transformer.text.tokenizer import RESERVED_TOKENS, SubwordTokenizer
from keras_transformer.text.vocabulary import (
    build_tokenizers,
    build_vocabulary,
    load_tokenizers,
    tokenizers_from_vocabularies,
)

__all__ = [
    "RESERVED_TOKENS",
    "DataError",
    "ParallelCorpus",
    "SubwordTokenizer",
    "build_tokenizers",
    "build_vocabulary",
    "demo_vocabularies",
    "english_number",
    "german_number",
    "load_tokenizers",
    "make_dataset",
    "make_demo_corpus",
    "padding_fraction",
    "read_parallel_files",
    "read_tsv",
    "tokenizers_from_vocabularies",
    "write_demo_files",
]
