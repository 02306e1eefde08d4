"""The language models: one interface to causal LMs, local or from the hub
(:mod:`.causal_lm`), and the book's miniature Pythia suite trained offline
(:mod:`.mini_pythia`)."""
