import pytest

from prefixroute.routing import blocks


def test_hashes_are_stable_across_processes():
    # Pinned: a change here silently re-keys every router's index and ring.
    assert blocks.chained_hashes("abcd" * 4, 8) == blocks.chained_hashes("abcd" * 4, 8)
    assert blocks.chained_hashes("ab", 2) == [blocks.xxhash.xxh3_64_intdigest(b"ab", 0)]


def test_only_full_blocks_are_hashed():
    assert len(blocks.chained_hashes("x" * 10, 4)) == 2
    assert blocks.chained_hashes("x" * 3, 4) == []


def test_each_hash_covers_every_block_before_it():
    a = blocks.chained_hashes("AAAABBBBCCCC", 4)
    b = blocks.chained_hashes("AAAABBBBDDDD", 4)
    c = blocks.chained_hashes("ZAAABBBBCCCC", 4)
    assert a[:2] == b[:2]
    assert a[2] != b[2]
    # Same later blocks after a different first block: no hash in common.
    assert not set(a) & set(c)


def test_salt_isolates_tenants_from_the_first_block():
    plain = blocks.chained_hashes("same prompt text", 4)
    t1 = blocks.chained_hashes("same prompt text", 4, salt="tenant-1")
    t2 = blocks.chained_hashes("same prompt text", 4, salt="tenant-2")
    assert not set(plain) & set(t1)
    assert not set(t1) & set(t2)
    assert t1 == blocks.chained_hashes("same prompt text", 4, salt="tenant-1")


def test_token_ids_are_blocked_by_tokens():
    assert blocks.chained_hashes([1, 2, 3, 4, 5], 2) == blocks.chained_hashes([1, 2, 3, 4], 2)
    a, b = blocks.chained_hashes([1, 2, 3, 4], 2), blocks.chained_hashes([1, 2, 3, 5], 2)
    assert a[0] == b[0]
    assert a[1] != b[1]
    # Token ids and the text of their digits are different prompts.
    assert blocks.chained_hashes([1, 2], 2) != blocks.chained_hashes("12", 2)


def test_tail_key_is_salted_and_distinct_from_block_hashes():
    assert blocks.tail_key("hi") == blocks.tail_key("hi")
    assert blocks.tail_key("hi", "t") != blocks.tail_key("hi")


def test_block_size_must_be_positive():
    with pytest.raises(ValueError, match="block_size must be positive"):
        blocks.chained_hashes("x", 0)


@pytest.mark.parametrize("text", ["plain ascii prompt " * 9, "naïve café — 東京 " * 7, "a\udcff surrogate " * 5])
def test_every_block_is_its_characters_in_utf8_chained_ascii_or_not(text):
    # ASCII text is encoded once and sliced by bytes; any other by characters, then encoded:
    # both must give each block's own characters' bytes, chained.
    seed, expected = 0, []
    for start in range(0, len(text) - len(text) % 8, 8):
        seed = blocks.xxhash.xxh3_64_intdigest(text[start : start + 8].encode("utf-8", "surrogatepass"), seed)
        expected.append(seed)
    assert blocks.chained_hashes(text, 8) == expected
    assert len(expected) == len(text) // 8
