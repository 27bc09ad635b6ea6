#!/usr/bin/env python3
"""Writes a tiny random LLaVA-OneVision checkpoint and transformers' vision outputs for it.

The C++ golden test (vision_golden_test.cc) loads the checkpoint with engine/model, runs
engine/vision and compares with what transformers computed here. Regenerate explicitly:

  .venv/bin/python tests/unit/engine/vision/golden/make_vision_golden.py \
      tests/unit/engine/vision/golden/data

Per dtype (f32, bf16) it writes <out>/tiny_ov_<dtype>/{config.json, model.safetensors} and
<out>/tiny_ov_<dtype>/expected.safetensors holding:
  pixel_values_videos [1, F, 3, S, S] f16     the input frames (f16-exact values; fed as f32)
  hidden_states.<k>   [F, T, D]               SiglipVisionModel hidden_states[k], k = 0..L
  video_features      [F*p*p + 1, H]          get_video_features(...).pooler_output[0]
  pixel_values_images [2, 1, 3, S, S] f16     two single-tile images (multi-image sample)
  image_features      [2*(T + 1), H]          get_image_features(..., batch_num_images=[2])
  anyres.<i>.pixel_values [P, 3, S, S] f16    tiles of one single-image sample (base first)
  anyres.<i>.image_size   [2] i64             its original (height, width)
  anyres.<i>.features     [N, H]              get_image_features(...) (anyres: unpad, shrink,
                                              a newline per row)
The tiny config uses 32-pixel pinpoints and anyres_max_2, so some cases shrink (ratio > 1.1).
Outputs are stored in f32 (bf16 results widened exactly). Also writes manifest.json with the
versions and seed.

It also writes <out>/tiny_llava_clip_f32/: a LLaVA-1.5-shaped model (CLIP tower with class token,
pre_layrnorm, quick_gelu, no conv bias; vision_feature_layer -2, strategy "default") with
  pixel_values    [2, 3, S, S] f16
  hidden_states.<k> [2, T, D]   CLIPVisionModel hidden_states[k]
  image_features  [2*(T-1), H]  get_image_features(...) (CLS dropped, no newline)
"""
import json
import os
import sys

import torch
import transformers
from safetensors.torch import save_file
from transformers import (LlavaConfig, LlavaForConditionalGeneration, LlavaOnevisionConfig,
                          LlavaOnevisionForConditionalGeneration)

SEED = 1234
FRAMES = 3
# (height, width) canvases in units of the 32-pixel tile, h-major like the real 384-pixel list.
PINPOINTS = [[32 * h, 32 * w] for h in (1, 2, 3) for w in (1, 2, 3)]
# Original (height, width) of the anyres cases: wide, tall, square-shrunk, single tile, odd.
ANYRES_SIZES = [(40, 70), (90, 30), (100, 100), (32, 32), (57, 93)]


def tiny_config():
    # SigLIP-shaped tower: image 32 / patch 6 leaves 2 unused pixels (like 384 / 14 leaves 6);
    # a 5x5 grid pools to 3x3 (odd size, ceil).
    vision = dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=48,
                  num_hidden_layers=3, num_attention_heads=4, image_size=32, patch_size=6,
                  num_channels=3, hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6,
                  vision_use_head=False)
    text = dict(model_type="qwen2", hidden_size=24, intermediate_size=40, num_hidden_layers=1,
                num_attention_heads=2, num_key_value_heads=1, vocab_size=128,
                max_position_embeddings=256, rms_norm_eps=1e-6, rope_theta=10000.0,
                tie_word_embeddings=True)
    return LlavaOnevisionConfig(vision_config=vision, text_config=text, image_token_index=120,
                                video_token_index=121, vision_feature_layer=-1,
                                vision_feature_select_strategy="full", projector_hidden_act="gelu",
                                multimodal_projector_bias=True,
                                image_grid_pinpoints=PINPOINTS, vision_aspect_ratio="anyres_max_2")


def tiny_clip_config():
    vision = dict(model_type="clip_vision_model", hidden_size=32, intermediate_size=40,
                  num_hidden_layers=3, num_attention_heads=2, image_size=32, patch_size=6,
                  num_channels=3, hidden_act="quick_gelu", layer_norm_eps=1e-5,
                  projection_dim=16)
    text = dict(model_type="llama", hidden_size=24, intermediate_size=40, num_hidden_layers=1,
                num_attention_heads=2, num_key_value_heads=2, vocab_size=128,
                max_position_embeddings=256, rms_norm_eps=1e-5)
    return LlavaConfig(vision_config=vision, text_config=text, image_token_index=120,
                       vision_feature_layer=-2, vision_feature_select_strategy="default",
                       projector_hidden_act="gelu")


def randomize(model):
    # Larger-than-init weights so every nonlinearity matters at this tiny width.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.15 * torch.randn_like(p))


def write_clip(out_root):
    torch.manual_seed(SEED + 2)
    config = tiny_clip_config()
    model = LlavaForConditionalGeneration(config).eval()
    randomize(model)
    out = os.path.join(out_root, "tiny_llava_clip_f32")
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    if os.path.exists(os.path.join(out, "generation_config.json")):
        os.remove(os.path.join(out, "generation_config.json"))
    S = config.vision_config.image_size
    g = torch.Generator().manual_seed(SEED + 3)
    pixels = (torch.rand(2, 3, S, S, generator=g) * 2 - 1).half().float()
    tensors = {"pixel_values": pixels.half()}
    with torch.no_grad():
        tower = model.model.vision_tower(pixels, output_hidden_states=True)
        for k, h in enumerate(tower.hidden_states):
            tensors[f"hidden_states.{k}"] = h.float().contiguous()
        image = model.model.get_image_features(pixels, vision_feature_layer=-2,
                                               vision_feature_select_strategy="default")
        tensors["image_features"] = torch.cat(list(image.pooler_output), dim=0).contiguous()
    save_file(tensors, os.path.join(out, "expected.safetensors"))
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump({"generator": "tests/unit/engine/vision/golden/make_vision_golden.py",
                   "torch": torch.__version__, "transformers": transformers.__version__,
                   "seed": SEED + 2, "dtype": "f32"}, f, indent=2)
    print(out, {k: list(v.shape) for k, v in tensors.items() if not k.startswith("hidden")})


def main(out_root):
    write_clip(out_root)
    for dtype_name, dtype in (("f32", torch.float32), ("bf16", torch.bfloat16)):
        torch.manual_seed(SEED)
        config = tiny_config()
        model = LlavaOnevisionForConditionalGeneration(config).eval()
        randomize(model)
        model = model.to(dtype)
        out = os.path.join(out_root, f"tiny_ov_{dtype_name}")
        os.makedirs(out, exist_ok=True)
        model.save_pretrained(out, safe_serialization=True)
        for extra in ("generation_config.json",):
            path = os.path.join(out, extra)
            if os.path.exists(path):
                os.remove(path)
        S = config.vision_config.image_size
        g = torch.Generator().manual_seed(SEED + 1)
        # Pixel inputs are f16-representable and stored as F16 (half the bytes, no loss).
        videos = (torch.rand(1, FRAMES, 3, S, S, generator=g) * 2 - 1).half().float()
        images = (torch.rand(2, 1, 3, S, S, generator=g) * 2 - 1).half().float()
        tensors = {"pixel_values_videos": videos.half(), "pixel_values_images": images.half()}
        with torch.no_grad():
            tower = model.model.vision_tower(videos[0].to(dtype), output_hidden_states=True)
            for k, h in enumerate(tower.hidden_states):
                tensors[f"hidden_states.{k}"] = h.float().contiguous()
            video = model.model.get_video_features(
                videos.to(dtype), vision_feature_layer=-1, vision_feature_select_strategy="full")
            tensors["video_features"] = video.pooler_output[0].float().contiguous()
            image = model.model.get_image_features(
                images.to(dtype), image_sizes=torch.tensor([[S, S], [S, S]]),
                vision_feature_layer=-1, vision_feature_select_strategy="full",
                batch_num_images=[2])
            tensors["image_features"] = torch.cat(image.pooler_output, dim=0).float().contiguous()
            from transformers.models.llava_onevision.modeling_llava_onevision import (
                image_size_to_num_patches)
            for i, (h, w) in enumerate(ANYRES_SIZES):
                n = image_size_to_num_patches((h, w), PINPOINTS, S)
                tiles = (torch.rand(n, 3, S, S, generator=g) * 2 - 1).half().float()
                res = model.model.get_image_features(
                    tiles[None].to(dtype), image_sizes=torch.tensor([[h, w]]),
                    vision_feature_layer=-1, vision_feature_select_strategy="full")
                tensors[f"anyres.{i}.pixel_values"] = tiles.half()
                tensors[f"anyres.{i}.image_size"] = torch.tensor([h, w], dtype=torch.int64)
                tensors[f"anyres.{i}.features"] = res.pooler_output[0].float().contiguous()
        save_file(tensors, os.path.join(out, "expected.safetensors"))
        with open(os.path.join(out, "manifest.json"), "w") as f:
            json.dump({"generator": "tests/unit/engine/vision/golden/make_vision_golden.py",
                       "torch": torch.__version__, "transformers": transformers.__version__,
                       "seed": SEED, "dtype": dtype_name, "frames": FRAMES}, f, indent=2)
        print(out, {k: list(v.shape) for k, v in tensors.items() if not k.startswith("hidden")
                    and "pixel" not in k})


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "data"))
