#!/usr/bin/env python3
"""Caches what the frozen vision side of an exported model gives the decoder for a synthvid split.

train_v2.py fine-tunes only the decoder and `image_newline`; the vision tower and the projector
stay as they are. So their output, the pooled and projected video tokens of every frame, is
computed once per video here instead of once per training step. It is exactly
`LlavaOnevisionModel.get_video_features(...).pooler_output` without its trailing `image_newline`
row (which stays trainable), stored as float16.

  prepare_features.py --model models/framezip-tiny-video --data .data/synthvid2 --split train \
      --cache .data/features2 [--shard k/n]

Output, per split:
  <cache>/<split>.f16    float16 [total_rows, hidden]; an item's rows are num_frames * tpf
  <cache>/<split>.json   {"hidden", "tokens_per_frame", "total_rows", "model", "items": [record
                          + "offset" (first row)]}
Shards write disjoint rows of the same file (shard 0 creates it); the .json comes from shard 0.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "synthvid"))
import synthvid  # noqa: E402  (v1's PyAV reader; v2 writes its mp4s the same way)

# Frames per vision-tower call: bounds memory on 512-frame videos, the result does not depend on it
# (every frame is encoded and pooled on its own).
CHUNK_FRAMES = 128


def load_records(data_dir, split, limit):
    with open(os.path.join(data_dir, f"{split}.jsonl")) as f:
        recs = [json.loads(line) for line in f]
    return recs[:limit] if limit else recs


def video_rows(model, processor, frames):
    """[F * tpf, hidden] float32: the decoder's video tokens of one video, newline excluded."""
    import torch

    cfg = model.config
    pixels = processor.video_processor(videos=[frames], return_tensors="pt")["pixel_values_videos"]
    parts = []
    with torch.no_grad():
        for a in range(0, pixels.shape[1], CHUNK_FRAMES):
            out = model.model.get_video_features(
                pixel_values_videos=pixels[:, a:a + CHUNK_FRAMES].to(model.dtype),
                vision_feature_layer=cfg.vision_feature_layer,
                vision_feature_select_strategy=cfg.vision_feature_select_strategy)
            parts.append(out.pooler_output[0, :-1].float())
    return torch.cat(parts).numpy()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--split", required=True)
    ap.add_argument("--cache", required=True)
    ap.add_argument("--shard", default="0/1")
    ap.add_argument("--limit", type=int, default=0, help="first N items only (0 = all)")
    args = ap.parse_args()
    import torch
    from transformers import AutoProcessor, LlavaOnevisionForConditionalGeneration

    torch.set_num_threads(1)
    os.nice(19)
    k, n = (int(x) for x in args.shard.split("/"))
    recs = load_records(args.data, args.split, args.limit)
    processor = AutoProcessor.from_pretrained(args.model)
    model = LlavaOnevisionForConditionalGeneration.from_pretrained(
        args.model, dtype=torch.float32).eval()
    hidden = model.config.text_config.hidden_size
    # Rows per frame: the pooled grid (ceil(side / 2) squared, as get_video_features pools).
    side = model.config.vision_config.image_size // model.config.vision_config.patch_size
    tpf = ((side + 1) // 2) ** 2
    offsets = np.cumsum([0] + [r["num_frames"] * tpf for r in recs]).tolist()
    total = offsets[-1]
    os.makedirs(args.cache, exist_ok=True)
    path = os.path.join(args.cache, f"{args.split}.f16")
    size = total * hidden * 2
    if k == 0:
        with open(os.path.join(args.cache, f"{args.split}.json"), "w") as f:
            json.dump({"hidden": hidden, "tokens_per_frame": tpf, "total_rows": total,
                       "model": os.path.abspath(args.model), "data": os.path.abspath(args.data),
                       "items": [dict(r, offset=off) for r, off in zip(recs, offsets)]}, f)
        if not (os.path.exists(path) and os.path.getsize(path) == size):
            np.memmap(path, dtype=np.float16, mode="w+", shape=(total, hidden)).flush()
    else:
        for _ in range(1200):  # shard 0 creates the file
            if os.path.exists(path) and os.path.getsize(path) == size:
                break
            time.sleep(0.5)
    rows = np.memmap(path, dtype=np.float16, mode="r+", shape=(total, hidden))
    t0 = time.time()
    for i, r in enumerate(recs):
        if i % n != k:
            continue
        frames = synthvid.read_mp4(os.path.join(args.data, r["video"]))
        if frames.shape[0] != r["num_frames"]:
            sys.exit(f"{r['video']}: {frames.shape[0]} frames, the record says {r['num_frames']}")
        feats = video_rows(model, processor, frames)
        assert feats.shape == (offsets[i + 1] - offsets[i], hidden), (r["id"], feats.shape)
        rows[offsets[i]:offsets[i + 1]] = feats.astype(np.float16)
        if i % 200 < n:
            print(f"{args.split} {i}/{len(recs)} {time.time() - t0:.0f}s", file=sys.stderr,
                  flush=True)
    rows.flush()
    print(f"{args.split} shard {k}/{n} done in {time.time() - t0:.0f}s", file=sys.stderr)


if __name__ == "__main__":
    main()
