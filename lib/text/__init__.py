"""The text pipeline: corpora (:mod:`.corpus`), tokenizers and token streams
(:mod:`.tokenization`), n-gram counts (:mod:`.ngrams`) and descriptive statistics
(:mod:`.textstats`). Text in, integer sequences and their counts out."""
