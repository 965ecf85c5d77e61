"""Where a prompt's text may be cut so that each piece tokenizes on its own, exactly.

Tokenizing a conversation once (`token_reuse`) rests on one fact about Hugging Face
`tokenizers`: `encode` first splits the text at its added tokens (leftmost-longest, over
the tokens that are not normalized), then normalizes, pre-tokenizes and models each
stretch between them by itself. So the stretches ("gaps") of a chat's rendered text —
role names, message contents, the template's own text — tokenize to the same ids alone
as inside the whole, and a gap seen once need never be tokenized again. That holds when:

- no added token strips whitespace around it or must stand as a single word (those
  reach into the neighbouring gaps), and none is matched after normalization;
- every pre-tokenizer treats each gap alike wherever it sits (not Metaspace's
  `prepend_scheme: first`, which marks only the text's first word); the model is
  deterministic (no BPE dropout); no truncation or padding is configured.

A long gap (a completion's prompt, a long message) is also cut inside, at a space that
follows a printable ASCII character, for the byte-level pre-tokenizers whose split we
know (GPT-2's, Llama 3's and Qwen 2's regular expressions, no normalizer but NFC): every
alternative of those expressions either consumes whitespace only or holds at most one
space, as its first character, so no pre-token spans that point, and the pre-tokens
before it read at most the space itself beyond their end — the same space whatever
follows. Cuts come at least `chunk_chars` apart so that a shared prefix is reused in
chunks, not per word.

Anything else gets no cuts (`cuts_of` returns None) and is tokenized whole; so does a
request that asks for special tokens when the post-processor's are not known.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# The pre-tokenizer expressions whose cuts at spaces are proven above, as tokenizer.json writes them.
GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)
_SPACE_SAFE_PATTERNS = (GPT2_PATTERN, LLAMA3_PATTERN, QWEN2_PATTERN)
# Pre-tokenizers that split each gap by its own text only.
_GAP_SAFE_PRE_TOKENIZERS = frozenset(
    ("ByteLevel", "Split", "Digits", "Punctuation", "Whitespace", "WhitespaceSplit", "BertPreTokenizer",
     "CharDelimiterSplit", "UnicodeScripts", "Metaspace")
)  # fmt: skip
DEFAULT_CHUNK_CHARS = 1024  # 256 cost 0.13 ms more per 8k-token chat turn in lookups (measured)

Piece = str | int  # a gap's text to tokenize, or an added token's id


@dataclass(frozen=True)
class Cuts:
    """How one tokenizer's input may be cut: at its added tokens, and inside gaps at spaces."""

    added: re.Pattern[str] | None  # the added tokens, longest first (None: it has none)
    added_ids: Mapping[str, int]
    at_spaces: bool
    # what `add_special_tokens` puts before and after the ids (None: unknown, tokenize whole)
    specials: tuple[tuple[int, ...], tuple[int, ...]] | None
    chunk_chars: int = DEFAULT_CHUNK_CHARS

    def pieces(self, text: str) -> list[Piece]:
        """`text` as gaps and added tokens, in order; concatenating the gaps' ids (each
        tokenized alone, without special tokens) and the tokens' ids gives the text's ids."""
        # One `split` in C gives gap, token, gap, ..., gap: 75 µs for an 8.7k-token chat,
        # against 95 µs for a Python loop over the matches.
        parts: list[str] = self.added.split(text) if self.added is not None else [text]
        mixed: list[Piece] = list(parts)
        mixed[1::2] = [self.added_ids[token] for token in parts[1::2]]
        chunk = self.chunk_chars
        if not self.at_spaces or max(map(len, parts[::2])) <= chunk:
            return [p for p in mixed if p != ""]
        out: list[Piece] = []
        for piece in mixed:
            if type(piece) is str and len(piece) > chunk:
                self._gap(piece, out)
            elif piece != "":
                out.append(piece)
        return out

    def _gap(self, gap: str, out: list[Piece]) -> None:
        """A gap longer than `chunk_chars`, cut at the first usable space past each chunk."""
        chunk = self.chunk_chars
        start, end = 0, len(gap)
        while True:
            cut = gap.find(" ", start + chunk)
            # a space after a printable ASCII character (never whitespace in any regex's sense)
            while cut > 0 and not "!" <= gap[cut - 1] <= "~":
                cut = gap.find(" ", cut + 1)
            if cut < 0:
                out.append(gap[start:end])
                return
            out.append(gap[start:cut])
            start = cut


def cuts_of(config: Mapping[str, Any], chunk_chars: int = DEFAULT_CHUNK_CHARS) -> Cuts | None:
    """The cuts a tokenizer.json allows (its parsed JSON), or None when cutting would not be exact."""
    if config.get("truncation") is not None or config.get("padding") is not None:
        return None
    model = config.get("model") or {}
    if model.get("dropout") not in (None, 0, 0.0):
        return None
    if not _gap_safe(config.get("pre_tokenizer")):
        return None
    added = config.get("added_tokens") or []
    for token in added:
        if token.get("lstrip") or token.get("rstrip") or token.get("single_word") or token.get("normalized"):
            return None
    contents = {str(t["content"]): int(t["id"]) for t in added if t.get("content")}
    pattern = None
    if contents:
        ordered = sorted(contents, key=len, reverse=True)  # at each position the longest wins, as in tokenizers
        pattern = re.compile("(" + "|".join(re.escape(c) for c in ordered) + ")")  # a group: split keeps them
    at_spaces = (
        config.get("normalizer") in (None, {"type": "NFC"})
        and _space_safe(config.get("pre_tokenizer"))
        and not any(ch.isspace() for c in contents for ch in c)
    )
    return Cuts(pattern, contents, at_spaces, _specials(config.get("post_processor")), chunk_chars)


def _gap_safe(pre: Any) -> bool:
    if pre is None:
        return True
    kind = pre.get("type")
    if kind == "Sequence":
        return all(_gap_safe(p) for p in pre.get("pretokenizers", []))
    if kind == "Metaspace":
        return pre.get("prepend_scheme") in ("always", "never")
    return kind in _GAP_SAFE_PRE_TOKENIZERS


def _byte_level(pre: Any, use_regex: bool) -> bool:
    return (
        isinstance(pre, Mapping)
        and pre.get("type") == "ByteLevel"
        and not pre.get("add_prefix_space")
        and bool(pre.get("use_regex", True)) == use_regex
    )


def _space_safe(pre: Any) -> bool:
    """GPT-2's ByteLevel, or a Split by a known expression followed by a ByteLevel without one."""
    if _byte_level(pre, use_regex=True):
        return True
    if not isinstance(pre, Mapping) or pre.get("type") != "Sequence":
        return False
    parts: Sequence[Any] = pre.get("pretokenizers", [])
    if len(parts) != 2 or not _byte_level(parts[1], use_regex=False):
        return False
    split = parts[0]
    return (
        split.get("type") == "Split"
        and split.get("behavior") == "Isolated"
        and not split.get("invert")
        and (split.get("pattern") or {}).get("Regex") in _SPACE_SAFE_PATTERNS
    )


def _specials(post: Any) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """The ids a post-processor adds around a single sequence, when it is one we can read."""
    if post is None or post.get("type") == "ByteLevel":
        return (), ()
    if post.get("type") == "Sequence":
        before: tuple[int, ...] = ()
        after: tuple[int, ...] = ()
        for part in post.get("processors", []):
            found = _specials(part)
            if found is None:
                return None
            before, after = found[0] + before, after + found[1]
        return before, after
    if post.get("type") != "TemplateProcessing":
        return None
    known = post.get("special_tokens", {})
    sides: tuple[list[int], list[int]] = ([], [])
    side = 0
    for item in post.get("single", []):
        if "Sequence" in item:
            side = 1
        elif "SpecialToken" in item:
            name = item["SpecialToken"]["id"]
            if name not in known:
                return None
            sides[side].extend(int(i) for i in known[name]["ids"])
    return tuple(sides[0]), tuple(sides[1])
