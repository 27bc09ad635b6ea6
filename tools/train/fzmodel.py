"""framezip-tiny-video: tokenizer, processor and model construction in the exact HF LLaVA-OneVision
layout (SigLIP vision tower, mlp2x_gelu projector, 2x2 bilinear video pooling + image_newline,
Qwen2 decoder, byte-level BPE tokenizer with the Qwen2 pre-tokenizer, ChatML template)."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "synthvid"))

import synthvid  # noqa: E402

# The llava-hf OV chat template, verbatim (transformers' convert_llava_onevision_weights_to_hf.py).
CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n'}}"
    "{# Render all images first #}{% for content in message['content'] | selectattr('type', 'equalto', 'image') %}"
    "{{ '<image>\n' }}{% endfor %}"
    "{# Render all video then #}{% for content in message['content'] | selectattr('type', 'equalto', 'video') %}"
    "{{ '<video>\n' }}{% endfor %}"
    "{# Render all text next #}{% if message['role'] != 'assistant' %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}{{ content['text'] }}{% endfor %}"
    "{% else %}{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{% generation %}{{ content['text'] }}{% endgeneration %}{% endfor %}{% endif %}"
    "{{'<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Qwen2's pre-tokenizer split regex, verbatim from its tokenizer.json (docs/models.md §6.5).
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# Same order as Qwen2 (ids follow the BPE vocabulary).
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>", "<video>"]

# Default architecture. IMAGE_SIZE/PATCH -> (IMAGE_SIZE/PATCH)^2 patches per frame, pooled 2x2.
ARCH = dict(
    image_size=64,
    patch_size=16,
    vision_hidden=96,
    vision_layers=2,
    vision_heads=3,
    vision_intermediate=384,
    text_hidden=128,
    text_layers=4,
    text_heads=4,
    text_kv_heads=2,
    text_intermediate=384,
    rope_theta=10000.0,
    max_positions=4096,
    bpe_vocab=512,
)


def tokenizer_corpus():
    """Every text the task can produce, plus the chat scaffolding."""
    texts = ["user", "assistant", "system", "\n", "You are a helpful assistant."]
    cols, shapes = list(synthvid.COLORS), synthvid.SHAPES
    texts += cols + shapes + synthvid.DIRECTIONS + [str(i) for i in range(10)]
    for c in cols:
        for s in shapes:
            texts.append(synthvid.QUESTION["color"].format(shape=s))
            texts.append(synthvid.QUESTION["shape"].format(color=c))
            texts.append(synthvid.QUESTION["direction"].format(color=c, shape=s))
            texts.append(synthvid.QUESTION["count"].format(color=c, shape=s))
            texts.append(synthvid.QUESTION["needle"].format(shape=s))
            for c2 in cols:
                for s2 in shapes:
                    if c2 != c and s2 != s:
                        texts.append(synthvid.QUESTION["order"].format(
                            color_a=c, shape_a=s, color_b=c2, shape_b=s2))
    return texts


def build_tokenizer(vocab_size: int):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(dropout=None, unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=1, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[])
    tok.train_from_iterator(tokenizer_corpus(), trainer=trainer)
    tok.add_special_tokens(SPECIAL_TOKENS)
    return tok


def wrap_tokenizer(tok):
    from transformers import PreTrainedTokenizerFast

    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
        clean_up_tokenization_spaces=False,
        model_max_length=ARCH["max_positions"],
        extra_special_tokens={"image_token": "<image>", "video_token": "<video>"},
        padding_side="right",
    )
    hf.chat_template = CHAT_TEMPLATE
    return hf


def build_processor(hf_tokenizer, arch=ARCH):
    from transformers import LlavaOnevisionImageProcessor, LlavaOnevisionProcessor, LlavaOnevisionVideoProcessor

    s = arch["image_size"]
    pinpoints = [[h * s, w * s] for h in range(1, 7) for w in range(1, 7)]
    common = dict(size={"height": s, "width": s}, resample=3, do_resize=True, do_rescale=True,
                  rescale_factor=1 / 255, do_normalize=True, image_mean=[0.5, 0.5, 0.5],
                  image_std=[0.5, 0.5, 0.5], do_convert_rgb=True)
    image_processor = LlavaOnevisionImageProcessor(image_grid_pinpoints=pinpoints, do_pad=True, **common)
    video_processor = LlavaOnevisionVideoProcessor(do_sample_frames=False, **common)
    n_tok = (s // arch["patch_size"]) ** 2
    return LlavaOnevisionProcessor(
        image_processor=image_processor, tokenizer=hf_tokenizer, video_processor=video_processor,
        num_image_tokens=n_tok, vision_feature_select_strategy="full", chat_template=CHAT_TEMPLATE,
        vision_aspect_ratio="anyres_max_9")


def build_config(hf_tokenizer, arch=ARCH):
    from transformers import LlavaOnevisionConfig, Qwen2Config, SiglipVisionConfig

    n = len(hf_tokenizer)
    vocab = (n + 63) // 64 * 64  # padded like the llava-hf converter
    vc = SiglipVisionConfig(
        hidden_size=arch["vision_hidden"], intermediate_size=arch["vision_intermediate"],
        num_hidden_layers=arch["vision_layers"], num_attention_heads=arch["vision_heads"],
        num_channels=3, image_size=arch["image_size"], patch_size=arch["patch_size"],
        hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6, attention_dropout=0.0,
        vision_use_head=False)
    tc = Qwen2Config(
        vocab_size=vocab, hidden_size=arch["text_hidden"], intermediate_size=arch["text_intermediate"],
        num_hidden_layers=arch["text_layers"], num_attention_heads=arch["text_heads"],
        num_key_value_heads=arch["text_kv_heads"], head_dim=arch["text_hidden"] // arch["text_heads"],
        hidden_act="silu", max_position_embeddings=arch["max_positions"], rms_norm_eps=1e-6,
        rope_theta=arch["rope_theta"], tie_word_embeddings=True, use_sliding_window=False,
        attention_dropout=0.0, bos_token_id=None,
        eos_token_id=hf_tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=hf_tokenizer.convert_tokens_to_ids("<|endoftext|>"))
    s = arch["image_size"]
    cfg = LlavaOnevisionConfig(
        vision_config=vc, text_config=tc,
        image_token_index=hf_tokenizer.convert_tokens_to_ids("<image>"),
        video_token_index=hf_tokenizer.convert_tokens_to_ids("<video>"),
        projector_hidden_act="gelu", vision_feature_select_strategy="full",
        vision_feature_layer=-1, vision_aspect_ratio="anyres_max_9",
        image_grid_pinpoints=[[h * s, w * s] for h in range(1, 7) for w in range(1, 7)],
        multimodal_projector_bias=True, tie_word_embeddings=True)
    return cfg


def video_tokens_per_frame(arch=ARCH):
    g = arch["image_size"] // arch["patch_size"]
    return ((g + 1) // 2) ** 2
