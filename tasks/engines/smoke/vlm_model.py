"""The tiny LLaVA of the VLM smoke leg: a CLIP vision tower and a tiny Llama, built locally with no hub.

Same recipe as `model.py` (word-level tokenizer trained on the committed corpus, numpy PCG64 weights seeded
with 0), with the differences a LLaVA needs: an `<image>` special token, a chat template that emits it for
`image` / `image_url` content parts, and a `LlavaProcessor` over the PIL CLIP image processor (torchvision is
unusable beside the CPU torch build). A 32x32 image in 8x8 patches becomes 16 image tokens.

`transformers serve` serves it on `/v1/chat/completions` (without `--continuous-batching`), taking images as
base64 data URLs; the answer depends on the image. The lm_head rows of the special tokens are zero, so greedy
decoding never ends early and every answer is exactly `max_tokens` long.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tasks.engines.smoke import model as smoke_model

MODEL_NAME = "tiny-llava"
IMAGE_TOKEN = "<image>"
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>", "<pad>", IMAGE_TOKEN)
IMAGE_SIZE, PATCH = 32, 8
TEXT = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "max_position_embeddings": 2048}
VISION = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
          "image_size": IMAGE_SIZE, "patch_size": PATCH, "projection_dim": 32}
INIT_STD = 0.5
SEED = 0
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }} : "
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for c in m['content'] %}"
    "{% if c['type'] in ('image', 'image_url') %}<image> {% elif c['type'] == 'text' %}{{ c['text'] }} {% endif %}"
    "{% endfor %}{% endif %} </s> {% endfor %}"
    "{% if add_generation_prompt %}assistant : {% endif %}"
)


def _seeded(model, special_ids: list[int]) -> dict:
    """Every parameter drawn from numpy's PCG64 in name order: norms are ones, biases zero, the rest normal."""
    import torch

    rng = np.random.default_rng(SEED)
    state = {}
    for name, tensor in sorted(model.state_dict().items()):
        shape = tuple(tensor.shape)
        if "norm" in name and name.endswith("weight"):
            value = np.ones(shape, np.float32)
        elif name.endswith("bias"):
            value = np.zeros(shape, np.float32)
        else:
            value = (rng.standard_normal(shape) * INIT_STD).astype(np.float32)
        if name.endswith("lm_head.weight"):
            value[special_ids] = 0.0
        state[name] = torch.from_numpy(value)
    return state


def build(out: Path) -> dict[str, str]:
    """Write the model folder `out` atomically; return {file name: sha256}."""
    import torch
    from transformers import (
        CLIPVisionConfig,
        GenerationConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
        PreTrainedTokenizerFast,
    )
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    raw = smoke_model.build_tokenizer(special_tokens=SPECIAL_TOKENS)
    ids = {t: raw.token_to_id(t) for t in SPECIAL_TOKENS}
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                        pad_token="<pad>", extra_special_tokens={"image_token": IMAGE_TOKEN},
                                        clean_up_tokenization_spaces=False)
    images = CLIPImageProcessorPil(size={"shortest_edge": IMAGE_SIZE},
                                   crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE})
    processor = LlavaProcessor(image_processor=images, tokenizer=tokenizer, patch_size=PATCH,
                               vision_feature_select_strategy="default", chat_template=CHAT_TEMPLATE,
                               num_additional_image_tokens=1)
    text = LlamaConfig(vocab_size=raw.get_vocab_size(), bos_token_id=ids["<s>"], eos_token_id=ids["</s>"],
                       pad_token_id=ids["<pad>"], tie_word_embeddings=False, **TEXT)
    config = LlavaConfig(vision_config=CLIPVisionConfig(**VISION), text_config=text, image_token_id=ids[IMAGE_TOKEN],
                         vision_feature_select_strategy="default", vision_feature_layer=-1)
    torch.manual_seed(SEED)   # only the throw-away initial values; every weight is replaced below
    model = LlavaForConditionalGeneration(config).eval()
    model.load_state_dict(_seeded(model, sorted(ids.values())))
    model.generation_config = GenerationConfig(bos_token_id=ids["<s>"], eos_token_id=ids["</s>"],
                                               pad_token_id=ids["<pad>"], do_sample=False)

    def write(work: Path) -> None:
        model.save_pretrained(work, safe_serialization=True)
        processor.save_pretrained(work)
        (work / "podium_model.json").write_text(json.dumps({"name": MODEL_NAME, "seed": SEED}) + "\n")

    return smoke_model.write_folder(out, write)
