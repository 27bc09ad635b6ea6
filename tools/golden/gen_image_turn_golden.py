#!/usr/bin/env python3
"""A single-image turn on the shipped model through transformers, for the anyres path end to end.

Explicit command, never run by the tests:
    .venv/bin/python tools/golden/gen_image_turn_golden.py

The image is one frame of a synthvid item (tools/synthvid), cropped to a wide rectangle so the
processor picks a canvas of several tiles and unpads it, saved as a PNG. transformers'
LlavaOnevisionProcessor (default torchvision backend) turns it and the item's question into the
prompt; LlavaOnevisionForConditionalGeneration (bf16, eager attention) answers greedily.

Writes to tests/data/golden/framezip-tiny-video-image/:
  input.png      the image, as committed (the goldens are of exactly these bytes)
  turn.json      question, image size, the processor's tile count, input_ids, the number of
                 <image> placeholders, greedy tokens (no eos stop) with each step's top-1 minus
                 top-2 logit margin, and the text up to the first eos
  manifest.json  versions, model, item, command
The C++ side (tests/integration/run_cli_test.cc through `framezip run --image`,
tests/integration/server_real_model_test.cc through an upload and a Chat) decodes the PNG through
media, runs the engine and compares.
"""
import json
import os
import pathlib
import sys

import numpy as np
import torch
import transformers
from PIL import Image
from transformers import AutoProcessor, LlavaOnevisionForConditionalGeneration

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "framezip-tiny-video"
OUT = ROOT / "tests" / "data" / "golden" / "framezip-tiny-video-image"
ITEM = ("test", 42)
CROP_ROWS = (24, 104)  # 80 of the frame's 128 rows: a 128 x 80 image
NEW_TOKENS = 12


def main():
    sys.path.insert(0, str(ROOT / "tools" / "synthvid"))
    import synthvid  # noqa: PLC0415
    rec, video = synthvid.make_item(*ITEM)
    OUT.mkdir(parents=True, exist_ok=True)
    Image.fromarray(video[0][CROP_ROWS[0]:CROP_ROWS[1]]).save(OUT / "input.png")
    image = Image.open(OUT / "input.png").convert("RGB")

    processor = AutoProcessor.from_pretrained(MODEL)
    model = LlavaOnevisionForConditionalGeneration.from_pretrained(
        MODEL, dtype=torch.bfloat16, attn_implementation="eager").eval()
    messages = [{"role": "user", "content": [{"type": "image"},
                                             {"type": "text", "text": rec["question"]}]}]
    prompt = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    inputs = processor(text=prompt, images=[image], return_tensors="pt")
    inputs["pixel_values"] = inputs["pixel_values"].to(torch.bfloat16)
    ids = inputs["input_ids"]
    image_token = model.config.image_token_id

    generated, margins = [], []
    with torch.no_grad():
        out = model(**inputs, use_cache=True, return_dict=True)
        past, logits, attn = out.past_key_values, out.logits[0, -1], inputs["attention_mask"]
        for _ in range(NEW_TOKENS):
            row = logits.float()
            top2 = torch.topk(row, 2).values
            margins.append(float(top2[0] - top2[1]))
            next_id = int(torch.argmax(row))
            generated.append(next_id)
            attn = torch.cat([attn, torch.ones((1, 1), dtype=attn.dtype)], dim=1)
            step = model(input_ids=torch.tensor([[next_id]]), attention_mask=attn,
                         past_key_values=past, use_cache=True, return_dict=True)
            past, logits = step.past_key_values, step.logits[0, -1]
    eos = set(model.generation_config.eos_token_id if isinstance(
        model.generation_config.eos_token_id, list) else [model.generation_config.eos_token_id])
    reply = []
    for t in generated:
        if t in eos:
            break
        reply.append(t)

    turn = {
        "question": rec["question"],
        "item_answer": rec["answer"],
        "image_size": [image.height, image.width],
        "tiles": int(inputs["pixel_values"].shape[1]),
        "prompt": prompt,
        "input_ids": ids[0].tolist(),
        "image_tokens": int((ids[0] == image_token).sum()),
        "greedy_tokens": generated,
        "greedy_margins": margins,
        "reply_text": processor.tokenizer.decode(reply),
    }
    (OUT / "turn.json").write_text(json.dumps(turn, indent=1) + "\n")
    manifest = {
        "generator": "tools/golden/gen_image_turn_golden.py",
        "model": "models/framezip-tiny-video",
        "item": f"{ITEM[0]}:{ITEM[1]} frame 0, rows {CROP_ROWS[0]}..{CROP_ROWS[1]}",
        "dtype": "torch.bfloat16",
        "attn_implementation": "eager",
        "versions": {"python": sys.version.split()[0], "torch": torch.__version__,
                     "transformers": transformers.__version__, "numpy": np.__version__},
    }
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(json.dumps({k: turn[k] for k in ("image_size", "tiles", "image_tokens", "reply_text",
                                           "greedy_margins")}))
    print("prompt tokens", len(turn["input_ids"]))


if __name__ == "__main__":
    main()
