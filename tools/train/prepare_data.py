#!/usr/bin/env python3
"""Decodes a synthvid split once and caches the model's preprocessed frames.

Frames go through the shipped LlavaOnevisionVideoProcessor with do_rescale/do_normalize off, which
yields exactly the uint8 frames that the processor resizes before its fused rescale+normalize
(pixel = (u8 - 127.5) / 127.5 with mean = std = 0.5). Output, per split:
  <cache>/<split>.u8      raw uint8 [total_frames, 3, S, S]
  <cache>/<split>.json    {"image_size", "items": [{record..., "offset": first frame row}]}
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fzmodel  # noqa: E402
import synthvid  # noqa: E402


def load_records(data_dir, split):
    with open(os.path.join(data_dir, f"{split}.jsonl")) as f:
        return [json.loads(line) for line in f]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--cache", required=True)
    ap.add_argument("--split", required=True)
    ap.add_argument("--shard", default="0/1")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    k, n = (int(x) for x in args.shard.split("/"))
    recs = load_records(args.data, args.split)
    S = fzmodel.ARCH["image_size"]
    offsets = np.cumsum([0] + [r["num_frames"] for r in recs]).tolist()
    total = offsets[-1]
    os.makedirs(args.cache, exist_ok=True)
    path = os.path.join(args.cache, f"{args.split}.u8")
    if k == 0:
        items = []
        for r, off in zip(recs, offsets):
            items.append(dict(r, offset=off))
        with open(os.path.join(args.cache, f"{args.split}.json"), "w") as f:
            json.dump({"image_size": S, "total_frames": total, "items": items}, f)
    # Every shard opens (and if needed creates) the full-size file and writes its own rows.
    mode = "r+" if os.path.exists(path) and os.path.getsize(path) == total * 3 * S * S else "w+"
    if mode == "w+" and k != 0:
        # Let shard 0 create it; wait briefly.
        import time
        for _ in range(600):
            if os.path.exists(path) and os.path.getsize(path) == total * 3 * S * S:
                mode = "r+"
                break
            time.sleep(0.5)
    mm = np.memmap(path, dtype=np.uint8, mode=mode, shape=(total, 3, S, S))
    tok = fzmodel.wrap_tokenizer(fzmodel.build_tokenizer(fzmodel.ARCH["bpe_vocab"]))
    vp = fzmodel.build_processor(tok).video_processor
    for i, r in enumerate(recs):
        if i % n != k:
            continue
        frames = synthvid.read_mp4(os.path.join(args.data, r["video"]))
        assert frames.shape[0] == r["num_frames"], (r["id"], frames.shape)
        out = vp(videos=[frames], do_rescale=False, do_normalize=False,
                 return_tensors="pt")["pixel_values_videos"][0]
        assert out.dtype == torch.uint8 and tuple(out.shape[1:]) == (3, S, S)
        mm[offsets[i]:offsets[i + 1]] = out.numpy()
        if i % 1000 == 0:
            print(f"{args.split} {i}/{len(recs)}", file=sys.stderr, flush=True)
    mm.flush()
    print(f"{args.split} shard {k}/{n} done", file=sys.stderr)


if __name__ == "__main__":
    main()
