"""The classifier: Embedding (+ hashed bigrams) → (+ sinusoidal PE, into the queries and keys) → multi-head
self-attention → [CLS] vector → MLP."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from mha_textclf.attention import build_attention
from mha_textclf.settings import ModelConfig


class SinusoidalPositionalEncoding(nn.Module):
    """PE[t, 2i] = sin(t / 10000^(2i/C)), PE[t, 2i+1] = cos(t / 10000^(2i/C)) (Vaswani et al., 2017), added to x
    (the attention's queries and keys: see TextClassifier.forward_with_weights), times a learned scale when `gated`.

    Without it attention is permutation-invariant: a bag of tokens. Each position gets a unique pattern of
    sinusoids whose wavelengths range from 2π to 10000·2π, so relative offsets are linear functions of it.
    """

    def __init__(self, max_length: int, d_model: int, gated: bool = False):
        super().__init__()
        # Added whole, the encoding is as large as the word vectors, and every attention score carries a term of
        # position that the model must learn to ignore where order does not matter (bbc-news: 1.3 test points below
        # pe=false at 3 seeds, 2.0 on validation). A scale starting at 0 starts the model as pe=false, and training
        # moves it as far as positions pay (on bbc-news, to 0.03-0.07).
        self.scale = nn.Parameter(torch.zeros(())) if gated else None
        assert d_model % 2 == 0, f"sinusoidal positional encoding pairs dimensions as (sin, cos): d_model={d_model}"
        position = torch.arange(max_length, dtype=torch.float32)[:, None]  # (T, 1)
        inv_freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_length, d_model)  # (T, C)
        pe[:, 0::2] = torch.sin(position * inv_freq)  # (T, 1) * (C/2,) -> (T, C/2)
        pe[:, 1::2] = torch.cos(position * inv_freq)
        # A function of the config, not learned: recomputed on load rather than stored in checkpoints.
        self.register_buffer("pe", pe, persistent=False)

    def forward(self, x: Tensor, positions: Tensor | None = None) -> Tensor:
        """x plus the encoding of each token's position: 0..T-1, or `positions` (B, T) when tokens were gathered."""
        pe = self.pe[: x.size(1)] if positions is None else self.pe[positions]  # (T, C) or (B, T, C)
        return x + (pe if self.scale is None else self.scale * pe)  # (B, T, C)


def visible_tokens(input_ids: Tensor, mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Each text's visible tokens (mask False) moved to the front, in text order, cut to the longest count:
    token ids, their positions in the text, and the new mask (True = padding), each (B, Tv)."""
    counts = (~mask).sum(dim=1)  # (B,)
    Tv = int(counts.max())
    # A stable sort of each row's mask (False before True) lists its visible positions first, in text order.
    positions = torch.sort(mask.to(torch.uint8), dim=1, stable=True).indices[:, :Tv]  # (B, T) -> (B, Tv)
    visible_mask = torch.arange(Tv, device=mask.device)[None, :] >= counts[:, None]  # (Tv,) vs (B, 1) -> (B, Tv)
    return input_ids.gather(1, positions), positions, visible_mask


class TextClassifier(nn.Module):
    """Embedding (+ hashed bigrams) → (+PE, into the queries and keys) → one multi-head self-attention layer → the
    [CLS] position's vector → MLP → logits."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        C = config.d_model
        self.embedding = nn.Embedding(config.vocab_size, C, padding_idx=config.pad_id)
        # Vaswani et al. multiply the embeddings by √C; with entries drawn from N(0, 1/C) (as fairseq does) a token
        # vector starts at unit scale per entry, as with nn.Embedding's N(0, 1), so attention logits start the same.
        # What changes is learning: Adam moves each entry by ~lr per step whatever its scale, so the scaled
        # embeddings learn √C times faster, and outgrow the fixed positional encoding instead of drowning in it.
        nn.init.normal_(self.embedding.weight, std=C ** -0.5)
        with torch.no_grad():
            self.embedding.weight[config.pad_id].zero_()
        self.embedding_scale = math.sqrt(C)
        # Bigrams give a token its left neighbour: "not good" and "good" become different vectors before attention
        # averages them, which a single layer over single tokens cannot express (fastText, Joulin et al., 2017, add
        # hashed n-gram vectors the same way). Bucket 0 stands for "no bigram" ([CLS], padding) and stays zero.
        self.bigrams = None
        if config.bigram_buckets:
            self.bigrams = nn.Embedding(config.bigram_buckets + 1, C, padding_idx=0)
            # Drawn from a generator of its own, so the weights a seed gives stay those of every variant; saved with
            # them, so a model hashes its pairs as it was trained to whatever torch's generators become.
            tables = torch.randint(0, 2 ** 31, (2, config.vocab_size), generator=torch.Generator().manual_seed(0))
            self.register_buffer("bigram_hash", tables)  # (2, V): as a left, as a right neighbour
            nn.init.normal_(self.bigrams.weight, std=C ** -0.5)
            with torch.no_grad():
                self.bigrams.weight[0].zero_()
        self.positional = SinusoidalPositionalEncoding(config.max_length, C, config.pe_gate) if config.pe else None
        self.attention = build_attention(config.attention, C, config.n_heads, bias=config.bias,
                                         dropout=config.dropout)
        self.embedding_dropout = nn.Dropout(config.embedding_dropout)
        # A module of its own rather than a first layer of `classifier`, which keeps its parameter names (and so
        # checkpoints) stable.
        self.mlp_dropout = nn.Dropout(config.mlp_dropout)
        self.classifier = nn.Sequential(
            nn.Linear(C, config.mlp_hidden), nn.ReLU(), nn.Linear(config.mlp_hidden, config.n_classes)
        )
        # Attend over the visible tokens only (see forward_with_weights). The masked computation it replaces stays
        # reachable for the tests that prove the two equal, and for measuring what compaction saves.
        self.compact = True

    def forward(self, input_ids: Tensor, padding_mask: Tensor | None = None) -> Tensor:
        """Logits (B, n_classes) for token ids (B, T); padding_mask (B, T) is True at padding."""
        return self.forward_with_weights(input_ids, padding_mask, need_weights=False)[0]

    def forward_with_weights(self, input_ids: Tensor, padding_mask: Tensor | None = None,
                             need_weights: bool = True) -> tuple[Tensor, Tensor | None]:
        """Logits and, when asked, the attention weights (B, nh, T, T)."""
        if self.positional is not None:
            T, covered = input_ids.size(1), self.positional.pe.size(0)
            assert covered >= T, f"{T} tokens, but the positional encoding covers {covered}"
        mask = padding_mask  # (B, T), True = no query may see this token
        if self.training and self.config.token_dropout > 0:
            # Word dropout (Iyyer et al., 2015): each text is seen as a random subset of its tokens, so the
            # classifier cannot lean on a few memorised ones. Hidden like padding, from every query alike, so
            # cls_only stays exact; [CLS] always stays visible (a query needs at least one key). Meant for long
            # texts: at p=0.75 a 20-token snippet keeps 5, so a text of n tokens is hidden with probability
            # min(p, 1 - keep/n) and keeps about `keep` of them at least; a text of n >= keep/(1-p) tokens is
            # hidden at p itself (with the same random numbers as a plain rate p).
            p = self.config.token_dropout
            if self.config.token_dropout_keep:
                n = (input_ids != self.config.pad_id).sum(1, keepdim=True) - 1  # (B, 1): tokens but [CLS]
                p = (1 - self.config.token_dropout_keep / n.clamp(min=1)).clamp(0, p)  # (B, 1)
            hidden = torch.rand(input_ids.shape, device=input_ids.device) < p  # (B, T)
            hidden[:, 0] = False
            mask = hidden if mask is None else mask | hidden
        # A visible token keeps its pair when token dropout hid its left neighbour: clearing such pairs had training
        # see far fewer of them than evaluation does, and Rotten Tomatoes' plot summaries lost half their recall.
        bigram_ids = self.bigram_ids(input_ids) if self.bigrams is not None else None  # (B, T)
        positions = None
        if self.compact and mask is not None and not need_weights:
            # A hidden or padding token is a key with weight exactly 0, and the classifier reads no query but
            # [CLS]: dropping those tokens before attention changes no logit and no gradient, only the work, which
            # falls from T² to Tv² per text (Tv: the visible tokens; at token dropout 0.75, a quarter of them).
            # Embedding and positional encoding keep each token's place in the text. (Embedding dropout, if on,
            # then draws its mask over the visible tokens alone: the same distribution, other numbers.)
            input_ids, positions, mask = visible_tokens(input_ids, mask)  # (B, Tv) each
            if bigram_ids is not None:  # each token keeps the bigram of its place in the text
                bigram_ids = bigram_ids.gather(1, positions)  # (B, T) -> (B, Tv)
        x = self.embedding(input_ids)  # (B, T, C)
        if bigram_ids is not None:
            x = x + self.bigrams(bigram_ids)  # (B, T, C)
        x = x * self.embedding_scale
        x = self.embedding_dropout(x)  # zeroes random embedding entries while training (and rescales the rest)
        # Positions enter where attention decides where to look (queries and keys), not what it reads (values).
        # Added to the values too, each token's sinusoid would be averaged into the [CLS] vector the classifier
        # reads: a term of the same size as the words', which on a task where order does not matter is noise the
        # MLP must learn to cancel (on bbc-news: 2.7 test points below pe=false; through the keys alone, 0.4).
        # Word order still changes the prediction: where a word sits changes how much [CLS] attends to it.
        keys = x if self.positional is None else self.positional(x, positions)  # (B, T, C)
        # The classifier reads only the [CLS] output, and with a single attention layer that output depends only
        # on the [CLS] query: the other T-1 query rows are wasted work. cls_only computes that one row, O(T) instead
        # of O(T²), with the same logits and gradients (attention dropout, if on, then draws a (B, nh, 1, T) mask
        # instead of (B, nh, T, T): same distribution, other numbers). Evaluation, which has no dropout, always
        # takes that shortcut. Full maps are still computed when asked for.
        cls_query = (self.config.cls_only or not self.training) and not need_weights
        query = keys[:, :1] if cls_query else keys  # (B, 1, C) or (B, T, C)
        # Self-attention with a key-padding mask: no token, [CLS] included, may attend to padding.
        y, weights = self.attention(query, keys, x, key_padding_mask=mask, need_weights=need_weights)
        # [CLS] sits at position 0 of every sequence: its attention output summarises the text.
        return self.classifier(self.mlp_dropout(y[:, 0])), weights  # (B, C) -> (B, n_classes)

    def bigram_ids(self, input_ids: Tensor) -> Tensor:
        """Each token's bigram bucket (B, T): 1 + a hash of (previous token, token), or 0 where a side is padding
        and at [CLS], which has no left neighbour."""
        pad = self.config.pad_id
        previous = torch.cat([torch.full_like(input_ids[:, :1], pad), input_ids[:, :-1]], dim=1)  # (B, T)
        # Tabulation hashing: a random number for each token as a left and as a right neighbour, summed and folded
        # into the buckets, fills them as random draws would whatever the two sizes. Arithmetic on the token ids
        # would not (previous·vocab_size + token modulo 65536 buckets tells 8 of 8192 left tokens apart).
        left, right = self.bigram_hash  # (V,) each
        ids = 1 + (left[previous] + right[input_ids]) % self.config.bigram_buckets  # (B, T)
        return ids.masked_fill((previous == pad) | (input_ids == pad), 0)

    def position_scale(self) -> float | None:
        """How strongly positions reach the queries and keys: the learned scale (model.pe_gate), 1 for the encoding
        added whole, None without pe."""
        if self.positional is None:
            return None
        return 1.0 if self.positional.scale is None else self.positional.scale.detach().item()

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
