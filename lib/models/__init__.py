"""The language models: one interface to causal LMs, local or from the hub
(:mod:`.causal_lm`), a model by hub name or local directory at a revision (:mod:`.hub`), models
shipped as GGUF files and their untrained twins (:mod:`.gguf_file`),
the book's miniature Pythia suite trained offline (:mod:`.mini_pythia`), and the machinery
that runs a transformer on many contexts sharing a prefix (:mod:`.prefix_reuse`, with the
GPT-NeoX last-position path of :mod:`.gpt_neox`)."""
