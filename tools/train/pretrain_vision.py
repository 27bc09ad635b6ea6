#!/usr/bin/env python3
"""Stage 1: align the vision tower + projector before the chat training (like LLaVA's stage 1).

From scratch, the full model sits at chance for thousands of steps: the answer position must
discover object colour/shape inside cluttered, textured frames through a random tower. Here the
tower and projector are trained alone on single frames with a dense target for each pooled video
token (exactly the tokens the decoder will see: tower last layer, no post-LN, projector, 2x2
bilinear pooling), read by a temporary linear head. Two target sets (--targets):
  - separate (the first shipped model's, 2026-11-30): the colours and the shapes of the objects centred in the
    token's quadrant, as two multi-label sets. With two objects in one quadrant this loses which
    colour goes with which shape — the shipped model answers colour/shape questions perfectly
    with one object and at chance between the objects with two or three (bench/RESULTS.md).
  - pairs: which (colour, shape) pairs are centred in the quadrant (multi-label over the 24
    pairs), and for each colour centred there the object's position in the frame (x, y in [0, 1],
    masked regression), so binding and motion are linearly readable. It reaches 93 % exact
    frames and ~1 px position error in 12 min. Alone, a 55-min stage 2 on it did not use the
    binding any better than with `separate` (55.7 % vs ~58 % val; .data/train5, 2026-11-30);
    with stage 2's auxiliary losses (train.py --facts-weight, --retrieval-weight) it is the
    stage 1 of the shipped model (2026-12-01), and tools/train/train.sh passes it.
The head is thrown away; the tower and projector initialize stage 2 (where they stay frozen).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fzmodel  # noqa: E402
import object_targets  # noqa: E402
import synthvid  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", required=True)
    ap.add_argument("--out", required=True, help="state_dict of the full model (tower+projector trained)")
    ap.add_argument("--log", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=6000)
    ap.add_argument("--time-budget-min", type=float, default=6.0)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--targets", choices=["separate", "pairs"], default="separate",
                    help="per-token targets: colours and shapes as separate labels (the shipped "
                         "model), or (colour, shape) pairs plus positions")
    args = ap.parse_args()
    import torch
    from transformers import LlavaOnevisionForConditionalGeneration

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    tok = fzmodel.wrap_tokenizer(fzmodel.build_tokenizer(fzmodel.ARCH["bpe_vocab"]))
    cfg = fzmodel.build_config(tok)
    cfg._attn_implementation = "eager"
    model = LlavaOnevisionForConditionalGeneration(cfg)
    with open(os.path.join(args.cache, "train.json")) as f:
        meta = json.load(f)
    S = meta["image_size"]
    frames = np.memmap(os.path.join(args.cache, "train.u8"), dtype=np.uint8, mode="r",
                       shape=(meta["total_frames"], 3, S, S))
    colors, shapes = list(synthvid.COLORS), synthvid.SHAPES
    pairs = args.targets == "pairs"
    # Label columns: pairs mode [24 pairs | 12 positions | 12 position mask]; separate mode
    # [6 colours | 4 shapes] (n_pos = 0: no position terms).
    n_pairs = len(colors) * len(shapes) if pairs else len(colors) + len(shapes)
    n_pos = 2 * len(colors) if pairs else 0
    # Dense targets: for each frame and each of its 2x2 pooled tokens (a quadrant of the frame),
    # the (colour, shape) pairs whose centre lies in that quadrant, then (x, y) per colour with a
    # mask. A scene never repeats a colour, so one position slot per colour is unambiguous.
    # Object tracks come from re-running the deterministic scene generator (no rendering).
    g = fzmodel.ARCH["image_size"] // fzmodel.ARCH["patch_size"]
    pg = (g + 1) // 2
    rows, labels = [], []
    for it in meta["items"]:
        index = int(it["id"].split("-")[1])
        _, _, F, objs, _, _, _ = synthvid.make_scene("train", index)
        assert F == it["num_frames"]
        for t in range(F):
            # [pairs | positions | position mask]
            y = np.zeros((pg * pg, n_pairs + 2 * n_pos), np.float32)
            for o in objs:
                p = o.track[t]
                if p is None:
                    continue
                k = object_targets.quadrant_token(p, pg)
                ci = colors.index(o.color)
                if not pairs:
                    y[k, ci] = 1
                    y[k, len(colors) + shapes.index(o.shape)] = 1
                    continue
                y[k, ci * len(shapes) + shapes.index(o.shape)] = 1
                y[k, n_pairs + 2 * ci:n_pairs + 2 * ci + 2] = (p[0] / synthvid.CANVAS,
                                                               p[1] / synthvid.CANVAS)
                y[k, n_pairs + n_pos + 2 * ci:n_pairs + n_pos + 2 * ci + 2] = 1
            rows.append(it["offset"] + t)
            labels.append(y)
    labels = np.stack(labels)
    H = cfg.text_config.hidden_size
    head = torch.nn.Linear(H, n_pairs + n_pos)
    params = (list(model.model.vision_tower.parameters())
              + list(model.model.multi_modal_projector.parameters()) + list(head.parameters()))
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01)
    tpf = fzmodel.video_tokens_per_frame()
    fh = open(args.log, "a")
    t0 = time.time()
    acc_hist, pos_err = [], []
    for step in range(args.steps):
        if time.time() - t0 > args.time_budget_min * 60:
            break
        idx = [rng.randrange(len(rows)) for _ in range(args.batch)]
        x = np.stack([frames[rows[i]] for i in idx])
        pv = (torch.from_numpy(x).float() - 127.5) / 127.5
        y = torch.from_numpy(labels[idx])
        frac = step / args.steps
        lr = args.lr * min(1.0, (step + 1) / 50) * (0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        feats = model.model.get_video_features(pixel_values_videos=pv[:, None]).pooler_output
        feats = feats[:, :tpf]  # drop the per-video image_newline
        out = head(feats)  # [B, tokens, pairs + positions]
        logits, pos = out[..., :n_pairs], out[..., n_pairs:]
        y_pairs, y_pos, mask = y[..., :n_pairs], y[..., n_pairs:n_pairs + n_pos], y[..., n_pairs + n_pos:]
        bce = torch.nn.functional.binary_cross_entropy_with_logits(logits, y_pairs)
        # Position error in canvas fractions; weighted so that ~4 px matter as much as a label.
        mse = ((pos - y_pos) ** 2 * mask).sum() / mask.sum().clamp(min=1)
        loss = bce + 10.0 * mse if pairs else bce
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        acc_hist.append(((logits > 0).float() == y_pairs).all(-1).all(-1).float().mean().item())
        pos_err.append((((pos - y_pos).abs() * mask).sum() / mask.sum().clamp(min=1)).item())
        if step % 50 == 0:
            rec = {"type": "stage1", "step": step, "loss": round(loss.item(), 5),
                   "frame_exact_acc": round(float(np.mean(acc_hist[-50:])), 4),
                   "pos_abs_err": round(float(np.mean(pos_err[-50:])), 4), "lr": round(lr, 6),
                   "elapsed_s": round(time.time() - t0, 1)}
            fh.write(json.dumps(rec) + "\n")
            fh.flush()
            print(json.dumps(rec), flush=True)
    torch.save(model.state_dict(), args.out)
    print("saved", args.out, "after", step + 1, "steps", flush=True)


if __name__ == "__main__":
    main()
