"""The tiny model a real vLLM engine serves here: built locally once, cached, never downloaded.

No model can be downloaded on these machines, and a shutdown test needs an engine that starts, not a model
that answers well. :func:`tiny_model` builds a 2-layer Llama with random weights and a byte-level BPE
tokenizer trained on a small in-code corpus, under ``$LASTCALL_CACHE/models/`` (default
``~/.cache/lastcall/models/``), and returns its directory; a second call finds it and does nothing.

The shape is the smallest vLLM's CPU backend takes: its attention supports head sizes 32, 64, 80, ...
(hidden 128 with 4 heads is head_dim 32; hidden 64 with 4 heads is refused), bf16 weights, 2048 positions
(``--max-model-len 2048``). Building imports ``tokenizers``, ``transformers`` and ``torch``, which only
the engine venv has (``./dev vllm-engine-env``); importing this module needs none of them.

The build is deterministic (fixed corpus, fixed seed), written into a temporary folder beside the cache entry
and renamed into place once complete, so a build killed half-way leaves no entry that looks whole.

    python -m harness.targets.vllm_model          # build if missing; prints the directory
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from harness.errors import ConfigError
from harness.targets.fetch import cache_dir

__all__ = ["MODEL_NAME", "tiny_model", "model_dir", "is_built"]

MODEL_NAME = "tiny-llama-v1"  # bump the suffix when the recipe below changes: a new cache entry
MARKER = ".lastcall-model"  # written last: its presence means the entry is whole
SPECIALS = ["<unk>", "<s>", "</s>", "<pad>"]
CHAT_TEMPLATE = ("{% for m in messages %}{{ '<s>' if loop.first else '' }}{{ m['role'] }}: {{ m['content'] }}\n"
                 "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}")
CONFIG = {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 4, "max_position_embeddings": 2048}
VOCAB = 512
SEED = 0
CORPUS = [  # what the tokenizer learns its merges from: a few lines of the field, repeated
    "The engine stops its listener, drains the handler and releases the port before it exits.",
    "A request that arrives after stop began is refused with shutting_down, never dispatched.",
    "Every socket file, directory and shared memory segment the run created is removed.",
    "The worker maps KV cache pages, answers the client and unmaps them on teardown.",
    "hello world, the quick brown fox jumps over the lazy dog; 0123456789 + - * / = ( ) [ ] { }",
]


def model_dir(root: Path | None = None) -> Path:
    return (root or cache_dir() / "models") / MODEL_NAME


def is_built(root: Path | None = None) -> bool:
    return (model_dir(root) / MARKER).is_file()


def _build(into: Path) -> None:
    try:
        import torch
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
        from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    except ImportError as exc:
        raise ConfigError(f"building the tiny model needs {exc.name} (the engine venv has it: "
                          f"./dev vllm-engine-env)") from None
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS * 20, trainer=trainer)
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", bos)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>", model_max_length=CONFIG["max_position_embeddings"])
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(into)
    torch.manual_seed(SEED)
    config = LlamaConfig(vocab_size=tok.get_vocab_size(), bos_token_id=bos, eos_token_id=tok.token_to_id("</s>"),
                         pad_token_id=tok.token_to_id("<pad>"), torch_dtype="bfloat16", **CONFIG)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(into, safe_serialization=True)
    (into / "lastcall-model.json").write_text(json.dumps({"name": MODEL_NAME, "seed": SEED, **CONFIG}) + "\n")


def tiny_model(root: Path | None = None) -> Path:
    """The tiny model's directory, built on first use (about 10 s) and cached.

    Error handling: ConfigError naming what is missing when the build's packages are not installed, or the
        cache folder cannot be written; a half-built entry is removed, never reused.
    """
    where = model_dir(root)
    if is_built(root):
        return where
    try:
        where.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{MODEL_NAME}-", dir=where.parent))
    except OSError as exc:
        raise ConfigError(f"cannot create the model cache under {where.parent}: {exc.strerror or exc}; "
                          f"set LASTCALL_CACHE to a writable folder") from None
    try:
        _build(tmp)
        (tmp / MARKER).write_text(MODEL_NAME + "\n")
        if where.exists():  # an incomplete entry (no marker) of an earlier, killed build
            shutil.rmtree(where)
        os.replace(tmp, where)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return where


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        print(tiny_model(Path(args[0]) if args else None))
    except ConfigError as exc:
        print(f"lastcall: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
