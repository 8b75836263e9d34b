"""What the tokenizer test modules share: a base tokenizer that keeps case and accents (test_wordpiece,
test_vocabulary). (The tokenizers they all read, `trained`, are a fixture of conftest.py.)"""

from mha_textclf.tokenizer import wordpiece


def cased_base(folder):
    """A WordPiece tokenizer folder whose pipeline keeps case and accents (the default pipeline drops both); returns
    its backend tokenizer."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    base = Tokenizer(models.WordPiece(vocab={t: i for i, t in enumerate(wordpiece.SPECIAL_TOKENS)}, unk_token="[UNK]"))
    base.normalizer = normalizers.BertNormalizer(lowercase=False, strip_accents=False)
    base.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    base.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]",
                                                        special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    PreTrainedTokenizerFast(tokenizer_object=base, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                            sep_token="[SEP]", mask_token="[MASK]").save_pretrained(folder)
    return base
