"""Text side: WordPiece tokenizers (tensorflow-text), corpora, `tf.data` pipelines, demo data.

Names are imported on first use: loading a tokenizer does not import the vocabulary learner.
"""

from keras_transformer._lazy import lazy_attributes

_SOURCES = {
    "CorpusFiles": ".corpus",
    "CorpusStats": ".corpus",
    "RESERVED_TOKENS": ".tokenizer",
    "DataError": ".data",
    "ParallelCorpus": ".data",
    "SubwordTokenizer": ".tokenizer",
    "build_tokenizers": ".vocabulary",
    "build_vocabulary": ".vocabulary",
    "demo_vocabularies": ".demo_data",
    "english_number": ".demo_data",
    "german_number": ".demo_data",
    "load_tokenizers": ".tokenizer_pair",
    "make_dataset": ".data",
    "make_demo_corpus": ".demo_data",
    "padding_fraction": ".data",
    "pair_dataset": ".corpus",
    "read_parallel_files": ".data",
    "read_tsv": ".data",
    "sample_corpus": ".corpus",
    "scan_corpus": ".corpus",
    "tokenizers_from_vocabularies": ".tokenizer_pair",
    "write_demo_files": ".demo_data",
}
__all__ = sorted(_SOURCES)
__getattr__ = lazy_attributes(__name__, _SOURCES)
