from prefixroute.engine_model import tokenizer


def test_four_bytes_per_token_and_rounding_up():
    assert len(tokenizer.encode("abcd" * 10)) == 10
    assert len(tokenizer.encode("abcde")) == 2
    assert tokenizer.count("abcde") == 2
    assert len(tokenizer.encode("")) == 0


def test_shared_text_prefix_gives_shared_token_prefix():
    a = tokenizer.encode("the same system prompt, then question one")
    b = tokenizer.encode("the same system prompt, then another question")
    shared = len("the same system prompt, then ") // 4
    assert list(a[:shared]) == list(b[:shared])
    assert list(a) != list(b)


def test_deterministic_and_non_ascii():
    assert list(tokenizer.encode("héllo wörld")) == list(tokenizer.encode("héllo wörld"))
    assert len(tokenizer.encode("é" * 4)) == 2  # 8 bytes of UTF-8
    assert all(0 <= t < tokenizer.VOCAB_LIMIT for t in tokenizer.encode("\U0001f600 emoji"))


def test_text_of_tokens_builds_exact_lengths():
    assert len(tokenizer.encode("x" * tokenizer.text_of_tokens(512))) == 512
