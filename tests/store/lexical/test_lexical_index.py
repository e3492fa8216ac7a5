"""The tokenizer's fast path for a few texts agrees with the tokenizer."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from store.lexical.index import term_sets, tokenize


@given(st.lists(st.text(max_size=80), max_size=5))
def test_term_sets_are_the_tokenizers_tokens_as_sets(texts: list[str]) -> None:
    samples = [*texts, "Café naïve résumé: 10k in 1:58!", "DON'T can't won't", "I'm a b 1 22"]
    assert term_sets(samples) == [frozenset(tokens) for tokens in tokenize(samples)]
