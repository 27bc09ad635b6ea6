#!/usr/bin/env python3
"""Writes a random-weight LLaVA model directory in the exact Hugging Face layout.

The model is built with transformers' own classes and written with save_pretrained, so the files
(config.json, model.safetensors, tokenizer.json, tokenizer_config.json, preprocessor_config.json,
video_preprocessor_config.json, processor_config.json / chat_template.jinja,
generation_config.json) are exactly what transformers writes for a real checkpoint.

Architectures:
  --arch ov-qwen2     LlavaOnevisionForConditionalGeneration: SigLIP tower + Qwen2 decoder
                      (model_type llava_onevision), Qwen2-style tokenizer (NFC, Qwen2 split regex,
                      byte-level BPE, ChatML specials, <image>/<video>), tied lm_head like 0.5B-OV.
  --arch llava-llama  LlavaForConditionalGeneration: CLIP tower + Llama decoder (model_type llava),
                      Llama-3-style tokenizer (no normalizer, 1-3 digit regex, ignore_merges,
                      <|begin_of_text|> via TemplateProcessing), untied lm_head.

The tokenizer is a small byte-level BPE trained with the `tokenizers` library on a built-in
multilingual corpus, so every byte is in the vocabulary and merges are real.

Sizes: --size tiny (default: hidden 64, 2 layers, image 32 px, patch 8) or --size 0.5b (the
Qwen2-0.5B + SigLIP-so400m shapes of llava-onevision-qwen2-0.5b-ov: ~900M parameters; only for
benchmarks, never checked in). Individual dimensions can be overridden.

Example:
  .venv/bin/python tools/make_tiny_model.py --arch ov-qwen2 --dtype f32 --seed 0 \
      --out tests/data/models/tiny-ov-qwen2-f32
"""

import argparse
import json
import math
import os
import sys

import torch
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers, processors, trainers

QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# The llava-hf OneVision chat template (convert_llava_onevision_weights_to_hf.py), verbatim.
OV_CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n'}}"
    "{# Render all images first #}{% for content in message['content'] | selectattr('type', "
    "'equalto', 'image') %}{{ '<image>\\n' }}{% endfor %}{# Render all video then #}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'video') %}"
    "{{ '<video>\\n' }}{% endfor %}{# Render all text next #}{% if message['role'] != "
    "'assistant' %}{% for content in message['content'] | selectattr('type', 'equalto', "
    "'text') %}{{ content['text'] }}{% endfor %}{% else %}{% for content in message['content'] "
    "| selectattr('type', 'equalto', 'text') %}{% generation %}{{ content['text'] }}"
    "{% endgeneration %}{% endfor %}{% endif %}{{'<|im_end|>' + '\\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

# Training text for the tiny BPE: mixed scripts, code, digits, whitespace runs, emoji.
CORPUS = [
    "The quick brown fox jumps over the lazy dog. What do you see in this image?",
    "Describe the video in detail. The image shows a radar chart comparing models.",
    "A child wearing a light blue sleeveless top and pink pants is reading a book on a bed.",
    "user assistant system You are a helpful assistant. I'm sure they're here, we've done it.",
    "Le cœur a ses raisons que la raison ne connaît point. Ça va très bien, merci!",
    "Über den Wolken muss die Freiheit wohl grenzenlos sein. Straße, Größe, Äpfel.",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "我能吞下玻璃而不伤身体。这是一个视频。图片里有什么？",
    "日本語のテキストです。カタカナとひらがな。",
    "한국어 문장입니다. 안녕하세요!",
    "مرحبا بالعالم. هذه جملة عربية.",
    "नमस्ते दुनिया। यह एक वाक्य है।",
    "Emoji: 😀 🎉 👍🏽 🇫🇷 ❤️ 👨‍👩‍👧‍👦",
    "def forward(self, x):\n    return self.linear(x) + 1\n\nfor i in range(10):\n\tprint(i)\n",
    "int main() { std::vector<int> v = {1, 2, 3}; return v.size() == 3 ? 0 : 1; }",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 123 2024 3.14159 1,000,000 -7 1e-6 0x1F",
    "   leading spaces, trailing spaces   \n\n\nmultiple newlines\r\nwindows line\ttab",
]


def train_tokenizer(arch: str, vocab_size: int) -> Tokenizer:
    """A byte-level BPE with the Qwen2 (ov-qwen2) or Llama-3 (llava-llama) pipeline."""
    tok = Tokenizer(models.BPE(dropout=None, unk_token=None, fuse_unk=False, byte_fallback=False,
                               ignore_merges=(arch == "llava-llama")))
    split = QWEN2_SPLIT if arch == "ov-qwen2" else LLAMA3_SPLIT
    if arch == "ov-qwen2":
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(split), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[])
    tok.train_from_iterator(CORPUS * 4, trainer=trainer)
    if arch == "ov-qwen2":
        specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>", "<video>"]
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    else:
        specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>",
                    "<image>"]
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    if arch == "llava-llama":
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                          pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                          special_tokens=[("<|begin_of_text|>", bos)]),
        ])
    return tok


def size_args(args):
    """Resolved model dimensions (tiny or 0.5b preset, then per-flag overrides)."""
    if args.size == "0.5b":
        d = dict(hidden=896, inter=4864, layers=24, heads=14, kv_heads=2, vocab_pad=152000,
                 v_hidden=1152, v_inter=4304, v_layers=26, v_heads=16, image=384, patch=14)
    else:
        d = dict(hidden=64, inter=128, layers=2, heads=4, kv_heads=2, vocab_pad=0,
                 v_hidden=32, v_inter=64, v_layers=2, v_heads=2, image=32, patch=8)
    for k in list(d):
        v = getattr(args, k, None)
        if v is not None:
            d[k] = v
    return d


def randomize(model: torch.nn.Module, seed: int) -> None:
    """Re-initialises every parameter with non-trivial values so goldens exercise everything:
    matrices N(0, 1/sqrt(fan_in)), norm weights 1 + N(0, 0.1), biases and vectors N(0, 0.1)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if p.dim() >= 2:
                fan_in = p[0].numel()
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(fan_in))
            elif "norm" in name or "layrnorm" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
        # Small embeddings (like trained ones relative to the residual stream) so that a tied head
        # does not just echo the input token and greedy decoding stays varied.
        emb = model.get_input_embeddings()
        emb.weight.copy_(0.25 * torch.randn(emb.weight.shape, generator=g))


def build(args) -> None:
    import transformers
    from transformers import (CLIPVisionConfig, GenerationConfig, LlamaConfig, LlavaConfig,
                              LlavaForConditionalGeneration, LlavaOnevisionConfig,
                              LlavaOnevisionForConditionalGeneration, PreTrainedTokenizerFast,
                              Qwen2Config, SiglipVisionConfig)

    torch.manual_seed(args.seed)
    d = size_args(args)
    tok = train_tokenizer(args.arch, args.bpe_vocab)
    n_tok = tok.get_vocab_size(with_added_tokens=True)
    # Like the OV converter: the embedding matrix is padded to a multiple of 64 rows.
    vocab = d["vocab_pad"] or (n_tok + 63) // 64 * 64
    if vocab < n_tok:
        sys.exit(f"vocab {vocab} is smaller than the tokenizer ({n_tok})")
    grid = d["image"] // d["patch"]
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[args.dtype]

    if args.arch == "ov-qwen2":
        eos = tok.token_to_id("<|im_end|>")
        pad = tok.token_to_id("<|endoftext|>")
        text = Qwen2Config(vocab_size=vocab, hidden_size=d["hidden"],
                           intermediate_size=d["inter"], num_hidden_layers=d["layers"],
                           num_attention_heads=d["heads"], num_key_value_heads=d["kv_heads"],
                           max_position_embeddings=32768, rms_norm_eps=1e-6,
                           rope_theta=1000000.0, hidden_act="silu", tie_word_embeddings=True,
                           use_sliding_window=False, bos_token_id=pad, eos_token_id=eos)
        vision = SiglipVisionConfig(hidden_size=d["v_hidden"], intermediate_size=d["v_inter"],
                                    num_hidden_layers=d["v_layers"],
                                    num_attention_heads=d["v_heads"], image_size=d["image"],
                                    patch_size=d["patch"], vision_use_head=False)
        tile = d["image"]
        pinpoints = [[tile * i, tile * j] for i in range(1, 4) for j in range(1, 4)]
        config = LlavaOnevisionConfig(
            text_config=text, vision_config=vision,
            image_token_index=tok.token_to_id("<image>"),
            video_token_index=tok.token_to_id("<video>"), vision_feature_layer=-1,
            vision_feature_select_strategy="full", vision_aspect_ratio="anyres_max_9",
            image_grid_pinpoints=pinpoints, projector_hidden_act="gelu",
            multimodal_projector_bias=True)
        model = LlavaOnevisionForConditionalGeneration(config)
    else:
        eos = tok.token_to_id("<|im_end|>")
        pad = tok.token_to_id("<|end_of_text|>")
        bos = tok.token_to_id("<|begin_of_text|>")
        text = LlamaConfig(vocab_size=vocab, hidden_size=d["hidden"],
                           intermediate_size=d["inter"], num_hidden_layers=d["layers"],
                           num_attention_heads=d["heads"], num_key_value_heads=d["kv_heads"],
                           max_position_embeddings=8192, rms_norm_eps=1e-5,
                           rope_theta=500000.0, hidden_act="silu", tie_word_embeddings=False,
                           bos_token_id=bos, eos_token_id=eos, pad_token_id=pad)
        vision = CLIPVisionConfig(hidden_size=d["v_hidden"], intermediate_size=d["v_inter"],
                                  num_hidden_layers=d["v_layers"],
                                  num_attention_heads=d["v_heads"], image_size=d["image"],
                                  patch_size=d["patch"], projection_dim=d["v_hidden"],
                                  hidden_act="quick_gelu", layer_norm_eps=1e-5)
        config = LlavaConfig(text_config=text, vision_config=vision,
                             image_token_index=tok.token_to_id("<image>"),
                             vision_feature_layer=-2, vision_feature_select_strategy="default",
                             projector_hidden_act="gelu", image_seq_length=grid * grid)
        model = LlavaForConditionalGeneration(config)

    randomize(model, args.seed)
    if args.size == "0.5b":
        # The 0.5B shape pads the embedding far past its small tokenizer (152000 rows, ~400
        # tokens). Random padding rows would win the tied head's argmax nearly every step, and
        # their ids decode to no text, so an OpenAI stream would carry nothing until its end.
        # Zero rows (never produced, as a trained checkpoint's padding nearly is) keep greedy
        # decoding on real tokens. The tiny presets keep their rows, so their goldens stand.
        with torch.no_grad():
            model.get_input_embeddings().weight[n_tok:].zero_()
    model = model.to(dtype).eval()
    os.makedirs(args.out, exist_ok=True)
    model.save_pretrained(args.out)
    GenerationConfig(bos_token_id=config.text_config.bos_token_id, eos_token_id=eos,
                     pad_token_id=pad).save_pretrained(args.out)

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=("<|begin_of_text|>" if args.arch == "llava-llama" else None),
        eos_token="<|im_end|>", pad_token=pad and tok.id_to_token(pad),
        unk_token=None, clean_up_tokenization_spaces=False, model_max_length=32768,
        chat_template=OV_CHAT_TEMPLATE)
    if args.arch == "ov-qwen2":
        from transformers import (LlavaOnevisionImageProcessor, LlavaOnevisionProcessor,
                                  LlavaOnevisionVideoProcessor)
        common = dict(size={"height": tile, "width": tile}, image_mean=[0.5, 0.5, 0.5],
                      image_std=[0.5, 0.5, 0.5], resample=3, do_rescale=True,
                      rescale_factor=1 / 255, do_normalize=True, do_convert_rgb=True)
        image_proc = LlavaOnevisionImageProcessor(image_grid_pinpoints=pinpoints, do_pad=True,
                                                  **common)
        video_proc = LlavaOnevisionVideoProcessor(**common)
        processor = LlavaOnevisionProcessor(image_processor=image_proc, tokenizer=fast,
                                            video_processor=video_proc,
                                            chat_template=OV_CHAT_TEMPLATE,
                                            num_image_tokens=grid * grid,
                                            vision_feature_select_strategy="full",
                                            vision_aspect_ratio="anyres_max_9")
    else:
        from transformers import CLIPImageProcessor, LlavaProcessor
        image_proc = CLIPImageProcessor(size={"shortest_edge": d["image"]},
                                        crop_size={"height": d["image"], "width": d["image"]},
                                        do_center_crop=True, resample=3)
        processor = LlavaProcessor(image_processor=image_proc, tokenizer=fast,
                                   patch_size=d["patch"], vision_feature_select_strategy="default",
                                   chat_template=OV_CHAT_TEMPLATE, num_additional_image_tokens=1)
    processor.save_pretrained(args.out)
    # transformers 5 nests the image processor in processor_config.json; hub checkpoints (and
    # our loader) also have the classic preprocessor_config.json next to it.
    image_proc.save_pretrained(args.out)
    # The tokenizer's own config carries the template too (as on the hub).
    tc_path = os.path.join(args.out, "tokenizer_config.json")
    with open(tc_path) as f:
        tc = json.load(f)
    tc["chat_template"] = OV_CHAT_TEMPLATE
    with open(tc_path, "w") as f:
        json.dump(tc, f, indent=2, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {args.out}: {args.arch} {args.dtype}, vocab {vocab} ({n_tok} tokens), "
          f"transformers {transformers.__version__}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", choices=["ov-qwen2", "llava-llama"], default="ov-qwen2")
    p.add_argument("--dtype", choices=["f32", "bf16", "f16"], default="f32")
    p.add_argument("--size", choices=["tiny", "0.5b"], default="tiny")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bpe-vocab", type=int, default=400,
                   help="BPE vocabulary size before special tokens (>= 256)")
    p.add_argument("--out", required=True)
    for k in ["hidden", "inter", "layers", "heads", "kv_heads", "v_hidden", "v_inter",
              "v_layers", "v_heads", "image", "patch"]:
        p.add_argument("--" + k.replace("_", "-"), dest=k, type=int, default=None)
    p.add_argument("--vocab-pad", dest="vocab_pad", type=int, default=None,
                   help="embedding rows (default: tokenizer size rounded up to 64)")
    build(p.parse_args())


if __name__ == "__main__":
    main()
