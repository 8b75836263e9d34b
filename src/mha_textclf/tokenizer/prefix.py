"""Where a long text may be cut before tokenizing, without changing its first max_length tokens. Shared by training's
encoder (encoding.py) and the torch-free serving one (mha_textclf.serving), so it imports nothing."""

CHARS_PER_TOKEN = 16  # a prefix this many characters per token nearly always holds max_length tokens


def text_prefix(text: str, max_length: int) -> str:
    """`text` cut at its last whitespace before max_length * CHARS_PER_TOKEN characters (the text itself when it is
    shorter). Tokenization works word by word, so the prefix's tokens are the text's first tokens: when they fill
    max_length, they are exactly the whole text's; otherwise the caller tokenizes the whole text."""
    limit = max_length * CHARS_PER_TOKEN
    if len(text) <= limit:
        return text
    cut = max(text.rfind(space, 0, limit) for space in " \n\t\r")
    return text[:cut] if cut > 0 else text
