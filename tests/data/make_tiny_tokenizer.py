"""Writes tests/data/tiny_tokenizer/: hyrl's 16-token tokenizer as a local Hugging Face directory.

    .venv/bin/python tests/data/make_tiny_tokenizer.py

Two additions to hyrl.data.tokenizer.build_tokenizer(), so that "3+4=" from a file encodes to the
same ids as the built-in task (bos + one id per character), with and without
--apply-chat-template:
* a post-processor that adds <bos> when add_special_tokens=True;
* a chat template that writes <bos> then the messages' contents, nothing else (the vocabulary
  has no characters for role markers; any other character would become <unk>).
"""

from __future__ import annotations

import os

from tokenizers.processors import TemplateProcessing

from hyrl.data.tokenizer import VOCAB, build_tokenizer

CHAT_TEMPLATE = "{{ bos_token }}{% for message in messages %}{{ message['content'] }}{% endfor %}"
OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny_tokenizer")


def main() -> None:
    tokenizer = build_tokenizer()
    tokenizer.backend_tokenizer.post_processor = TemplateProcessing(
        single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", VOCAB.index("<bos>"))]
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(OUT_DIR)
    print(f"wrote {OUT_DIR}")


if __name__ == "__main__":
    main()
