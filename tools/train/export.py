#!/usr/bin/env python3
"""Writes framezip-tiny-video in the Hugging Face layout of the llava-hf OV checkpoints.

transformers >= 5 flattens SiglipVisionModel and saves `vision_tower.encoder...`; the hub's
llava-hf OV checkpoints (and transformers <= 4.x) use `vision_tower.vision_model.encoder...`.
We rewrite the names to the hub's legacy layout (docs/models.md §5.1), which every transformers
version loads (v5 through its conversion mapping). The lm_head is tied and not stored.

Standalone use: re-export a training checkpoint:
  export.py --ckpt .data/train/ckpt.pt --out models/framezip-tiny-video
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fzmodel  # noqa: E402


def hub_name(k: str) -> str:
    if k.startswith("vision_tower.") and not k.startswith("vision_tower.vision_model."):
        return "vision_tower.vision_model." + k[len("vision_tower."):]
    return k


def export_model(model, processor, out_dir, extra_files=()):
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import GenerationConfig

    os.makedirs(out_dir, exist_ok=True)
    m = copy.deepcopy(model).to(torch.bfloat16)
    m.config.dtype = "bfloat16"
    # A model loaded with from_pretrained(dtype=float32) carries that dtype in its sub-configs
    # too; the weights written here are bf16 throughout.
    for sub in (m.config.text_config, m.config.vision_config):
        if getattr(sub, "dtype", None) is not None:
            sub.dtype = "bfloat16"
    m.generation_config = GenerationConfig(
        eos_token_id=processor.tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=processor.tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        do_sample=False, max_new_tokens=8)
    tmp = out_dir.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    m.save_pretrained(tmp, safe_serialization=True)
    st = os.path.join(tmp, "model.safetensors")
    sd = load_file(st)
    sd = {hub_name(k): v.contiguous() for k, v in sd.items() if k != "lm_head.weight"}
    save_file(sd, st, metadata={"format": "pt"})
    processor.save_pretrained(tmp)
    # Also the classic per-processor files of the hub repos.
    processor.image_processor.to_json_file(os.path.join(tmp, "preprocessor_config.json"))
    processor.video_processor.to_json_file(os.path.join(tmp, "video_preprocessor_config.json"))
    # A processor loaded from a folder saves where it came from (transformers 5.24): not part of
    # the model.
    tc = os.path.join(tmp, "tokenizer_config.json")
    with open(tc) as f:
        cfg = json.load(f)
    junk = [k for k in ("is_local", "local_files_only") if k in cfg]
    if junk:
        for k in junk:
            del cfg[k]
        with open(tc, "w") as f:
            json.dump(cfg, f, indent=2, sort_keys=True, ensure_ascii=False)
            f.write("\n")
    for f in extra_files:
        if os.path.exists(f):
            shutil.copy(f, tmp)
    for name in os.listdir(tmp):
        os.replace(os.path.join(tmp, name), os.path.join(out_dir, name))
    shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--log", default=None, help="training_log.jsonl to copy along")
    args = ap.parse_args()
    import torch
    from transformers import LlavaOnevisionForConditionalGeneration

    tok = fzmodel.wrap_tokenizer(fzmodel.build_tokenizer(fzmodel.ARCH["bpe_vocab"]))
    processor = fzmodel.build_processor(tok)
    model = LlavaOnevisionForConditionalGeneration(fzmodel.build_config(tok))
    ck = torch.load(args.ckpt, weights_only=False, map_location="cpu")
    model.load_state_dict(ck["model"])
    export_model(model, processor, args.out, [args.log] if args.log else [])
    print("exported step", ck["state"]["step"], "to", args.out)


if __name__ == "__main__":
    main()
