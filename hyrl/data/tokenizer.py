"""A 16-token character-level tokenizer for the built-in arithmetic task, built in memory."""

from __future__ import annotations

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

# The id of a token is its position here; never reorder (checkpoints depend on it).
VOCAB: tuple[str, ...] = ("<pad>", "<eos>", "<bos>", *"0123456789", "+", "=", "<unk>")
TOKENIZER_VOCAB_SIZE = 16
assert len(VOCAB) == TOKENIZER_VOCAB_SIZE


def build_tokenizer() -> PreTrainedTokenizerFast:
    """Character-level WordLevel tokenizer: "3+4=" -> [6, 13, 7, 14], with no bos/eos added.

    Every character is its own token (unknown characters, spaces included, become <unk>);
    decoding joins tokens without spaces. Round-trips through save_pretrained/AutoTokenizer.
    """
    backend = Tokenizer(
        models.WordLevel({token: i for i, token in enumerate(VOCAB)}, unk_token="<unk>")
    )
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token="<pad>",
        eos_token="<eos>",
        bos_token="<bos>",
        unk_token="<unk>",
    )
