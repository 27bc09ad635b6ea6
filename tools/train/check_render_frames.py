#!/usr/bin/env python3
"""How much do frames rendered straight into the processor differ from the frames the mp4
pipeline gives (synthvid's H.264 writer, PyAV reader, then the processor), and does the model
answer differently on them?

For the first --v2 / --v1 val items: the processor-resized uint8 frames (64x64, what the vision
tower sees) both ways, their mean and max |difference| (and the same at 128x128 before the
resize), then a teacher-forced evaluation of --model (train_render.evaluate) on each, with the
number of turns whose outcome differs. Needs PyAV (the H.264 side); the GPU machine has none.

  check_render_frames.py --model models/framezip-tiny-video --v2 240 --v1 300 --out FILE.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import render_data as rd  # noqa: E402


def pixel_stats(specs, video_processor):
    """{"resized": {...}, "canvas": {...}}: mean/max |direct - H.264| over all pixels."""
    out = {}
    for name in ("canvas", "resized"):
        out[name] = {"sum": 0.0, "n": 0, "max": 0, "hist": np.zeros(256, np.int64)}
    for spec in specs:
        _, raw = rd.render_item(spec)
        dec = rd.h264_round_trip(raw)
        pairs = {"canvas": (raw, dec),
                 "resized": (rd.resize_frames(video_processor, raw).numpy(),
                             rd.resize_frames(video_processor, dec).numpy())}
        for name, (a, b) in pairs.items():
            d = np.abs(a.astype(np.int16) - b.astype(np.int16))
            o = out[name]
            o["sum"] += float(d.sum())
            o["n"] += d.size
            o["max"] = max(o["max"], int(d.max()))
            o["hist"] += np.bincount(d.ravel(), minlength=256)
    res = {}
    for name, o in out.items():
        c = np.cumsum(o["hist"]) / o["n"]
        res[name] = {"mean_abs": round(o["sum"] / o["n"], 4), "max_abs": o["max"],
                     "p99_abs": int(np.searchsorted(c, 0.99)),
                     "share_equal": round(float(o["hist"][0] / o["n"]), 4),
                     "share_within_4": round(float(c[4]), 4)}
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="models/framezip-tiny-video")
    ap.add_argument("--v2", type=int, default=240)
    ap.add_argument("--v1", type=int, default=300)
    ap.add_argument("--pixel-items", type=int, default=60,
                    help="items (half v2, half v1) whose pixels are compared (0: none)")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    import torch
    from transformers import AutoProcessor, LlavaOnevisionForConditionalGeneration
    from train_render import evaluate

    torch.set_num_threads(1)
    processor = AutoProcessor.from_pretrained(args.model)
    model = LlavaOnevisionForConditionalGeneration.from_pretrained(
        args.model, dtype=torch.float32, attn_implementation="sdpa").eval()
    cfg = model.config
    side = cfg.vision_config.image_size // cfg.vision_config.patch_size
    tpf = ((side + 1) // 2) ** 2
    t = time.time()
    half = args.pixel_items // 2
    report = {"model": args.model, "pixel_items": args.pixel_items}
    if args.pixel_items:
        report["pixels"] = pixel_stats(rd.eval_specs(half, args.pixel_items - half),
                                       processor.video_processor)
    report["pixels_s"] = round(time.time() - t, 1)
    print(json.dumps(report), flush=True)
    ev_args = argparse.Namespace(tokens_per_step=4096, row_tokens=4096, workers=args.workers)
    specs = rd.eval_specs(args.v2, args.v1)
    outcomes = {}
    for name, h264 in (("direct", False), ("h264", True)):
        t = time.time()
        data = rd.RenderedChats(processor.tokenizer, processor.video_processor, tpf, h264=h264)
        outcomes[name] = {}
        report[name] = evaluate(model, data, specs, ev_args, torch.device("cpu"), tpf,
                                outcomes=outcomes[name])
        report[name]["eval_s"] = round(time.time() - t, 1)
        print(json.dumps({name: report[name]}), flush=True)
    keys = outcomes["direct"].keys()
    report["turns_differing"] = sum(outcomes["direct"][k] != outcomes["h264"][k] for k in keys)
    report["turns_right_direct_only"] = sum(outcomes["direct"][k] > outcomes["h264"][k]
                                            for k in keys)
    report["turns_right_h264_only"] = sum(outcomes["direct"][k] < outcomes["h264"][k]
                                          for k in keys)
    report["turns"] = len(keys)
    print(json.dumps({k: report[k] for k in ("turns", "turns_differing",
                                             "turns_right_direct_only", "turns_right_h264_only")}))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
