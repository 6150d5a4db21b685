"""The tiny Llama of the CPU smoke engine, built locally and byte-identical on every machine.

No hub, no torch RNG: the tokenizer is a word-level vocabulary trained with `tokenizers` on the committed
`corpus.txt`, and the weights come from numpy's PCG64 generator seeded with 0. Every token is one
whitespace-free word, so `encode(decode(ids)) == ids` for any generated sequence: the harness can recover the
engine's exact output token ids from the text that `transformers serve` streams.

The rows of `lm_head` for the special tokens are zero, so greedy decoding practically never picks EOS and every
answer is exactly `max_tokens` long (`transformers serve` rejects `ignore_eos`).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from submission.base.files import sha256_file

CORPUS = Path(__file__).with_name("corpus.txt")
MODEL_NAME = "tiny-llama"
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>", "<pad>")
HIDDEN, INTERMEDIATE, LAYERS, HEADS, KV_HEADS = 128, 256, 2, 4, 2
MAX_POSITIONS = 2048
INIT_STD = 0.5  # large weights make greedy output vary from token to token instead of repeating one word
SEED = 0
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} </s> {% endfor %}"
    "{% if add_generation_prompt %}assistant : {% endif %}"
)


def build_tokenizer(corpus: Path = CORPUS, special_tokens: tuple[str, ...] = SPECIAL_TOKENS):
    """A word-level tokenizer over the corpus: lower-cased, split on whitespace, decoded by joining with spaces."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.WordLevelTrainer(vocab_size=4096, min_frequency=1, special_tokens=list(special_tokens))
    tok.train([str(corpus)], trainer)
    return tok


def _config(vocab_size: int, ids: dict[str, int]) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab_size,
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HIDDEN // HEADS,
        "hidden_act": "silu",
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "bos_token_id": ids["<s>"],
        "eos_token_id": ids["</s>"],
        "pad_token_id": ids["<pad>"],
    }


def _weights(vocab_size: int, special_ids: list[int]) -> dict[str, np.ndarray]:
    """Seeded float32 weights in a fixed order; norms are ones."""
    rng = np.random.default_rng(SEED)
    head_dim = HIDDEN // HEADS

    def normal(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * INIT_STD).astype(np.float32)

    tensors: dict[str, np.ndarray] = {"model.embed_tokens.weight": normal(vocab_size, HIDDEN)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        tensors[p + "self_attn.q_proj.weight"] = normal(HEADS * head_dim, HIDDEN)
        tensors[p + "self_attn.k_proj.weight"] = normal(KV_HEADS * head_dim, HIDDEN)
        tensors[p + "self_attn.v_proj.weight"] = normal(KV_HEADS * head_dim, HIDDEN)
        tensors[p + "self_attn.o_proj.weight"] = normal(HIDDEN, HEADS * head_dim)
        tensors[p + "mlp.gate_proj.weight"] = normal(INTERMEDIATE, HIDDEN)
        tensors[p + "mlp.up_proj.weight"] = normal(INTERMEDIATE, HIDDEN)
        tensors[p + "mlp.down_proj.weight"] = normal(HIDDEN, INTERMEDIATE)
        tensors[p + "input_layernorm.weight"] = np.ones(HIDDEN, np.float32)
        tensors[p + "post_attention_layernorm.weight"] = np.ones(HIDDEN, np.float32)
    tensors["model.norm.weight"] = np.ones(HIDDEN, np.float32)
    lm_head = normal(vocab_size, HIDDEN)
    lm_head[special_ids] = 0.0
    tensors["lm_head.weight"] = lm_head
    return tensors


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def build(out: Path) -> dict[str, str]:
    """Write the model folder `out` atomically; return {file name: sha256}."""
    from safetensors.numpy import save_file

    tok = build_tokenizer()
    ids = {t: tok.token_to_id(t) for t in SPECIAL_TOKENS}
    vocab_size = tok.get_vocab_size()
    def write(work: Path) -> None:
        tok.save(str(work / "tokenizer.json"))
        _write_json(work / "tokenizer_config.json", {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>",
            "model_max_length": MAX_POSITIONS, "clean_up_tokenization_spaces": False,
            "chat_template": CHAT_TEMPLATE,
        })
        _write_json(work / "config.json", _config(vocab_size, ids))
        _write_json(work / "generation_config.json", {
            "bos_token_id": ids["<s>"], "eos_token_id": ids["</s>"], "pad_token_id": ids["<pad>"], "do_sample": False,
        })
        weights = _weights(vocab_size, sorted(ids.values()))
        save_file(weights, str(work / "model.safetensors"), metadata={"format": "pt"})

    return write_folder(out, write)


def write_folder(out: Path, write: Callable[[Path], None]) -> dict[str, str]:
    """Run `write` on a fresh folder beside `out`, then put it in place of `out` in one rename, so a failed build
    leaves no half-written model; return {file name: sha256} of its files."""
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        write(work)
        manifest = {p.name: sha256_file(p) for p in sorted(work.iterdir()) if p.is_file()}
        if out.exists():
            shutil.rmtree(out)
        work.rename(out)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return manifest
