#!/usr/bin/env python3
"""Attention mass of every decoder head on each answer's evidence frames (evidence.py), per
synthvid v2 task: which heads look where the answer is, before and after --evidence-weight.

  evidence_mass.py --model M [--cache .data/features2] [--split val] [--per-task 6]

Prints one JSON line per task: the mean mass per head ("L<layer 1-based>h<head>") over the
supervised answer positions, and "share", the evidence's mean fraction of the video tokens (what
a head spread evenly over the video would get).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from evidence import EvidenceTargets, evidence_loss  # noqa: E402
from train_v2 import FeatureSplit, Renderer, collate, item_turns, splice_video  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--cache", default=".data/features2", help="prepare_features.py v2 cache")
    ap.add_argument("--split", default="val")
    ap.add_argument("--per-task", type=int, default=6, help="items per task")
    args = ap.parse_args()

    import torch
    from transformers import AutoProcessor, LlavaOnevisionForConditionalGeneration
    torch.set_num_threads(1)
    proc = AutoProcessor.from_pretrained(args.model)
    model = LlavaOnevisionForConditionalGeneration.from_pretrained(
        args.model, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    renderer, targets_of = Renderer(proc.tokenizer), EvidenceTargets(proc.tokenizer)
    split = FeatureSplit(args.cache, args.split, "v2")
    caught = {}
    for layer, block in enumerate(model.model.language_model.layers):
        block.self_attn.register_forward_hook(
            lambda _m, _i, out, layer=layer: caught.__setitem__(layer, out[1]))
    by_task = {}
    for it in split.items:
        by_task.setdefault(it["task"], []).append(it)
    for task, items in sorted(by_task.items()):
        masses, shares = {}, []
        for it in items[:args.per_task]:
            batch = [(it, item_turns(None, it))]
            ids, labels, turn_of, mask, video = collate(renderer, batch)
            targets = targets_of.build(batch, ids, labels, turn_of, renderer.video_id, split.tpf)
            if targets is None:
                continue
            with torch.no_grad():
                model.model.language_model(inputs_embeds=splice_video(model, ids, video),
                                           attention_mask=mask)
            for layer, weights in caught.items():
                for head in range(weights.shape[1]):
                    masses.setdefault(f"L{layer + 1}h{head}", []).append(
                        evidence_loss(weights, head, targets)[1].item())
            shares.append(targets[2].float().sum(-1).mean().item() /
                          (it["num_frames"] * split.tpf + 1))
        if shares:
            row = {k: round(sum(v) / len(v), 3) for k, v in masses.items()}
            print(json.dumps({"task": task, "items": len(shares),
                              "share": round(sum(shares) / len(shares), 3), **row}))


if __name__ == "__main__":
    main()
