#!/usr/bin/env python3
"""Where an exported model's attention goes, at the last prompt position (the one that predicts the
answer), per decoder layer:
  - ZipVL's top-p sparsity (docs/methods.md §1.1): the fraction of the prompt's tokens holding a
    mass tau of the attention summed over heads; and the same over video tokens only (mass
    restricted to and renormalised over the video tokens);
  - the entropy of each head's attention over the video tokens (renormalised), in nats and
    divided by log(video tokens) (1 = uniform, 0 = one token), averaged over heads and items.
Works on synthvid v1 (question) and v2 (the first turn's question) JSONL.

  attention_stats.py --model models/framezip-tiny-video --data .data/synthvid --split val --limit 60
  attention_stats.py --model M --data .data/synthvid2 --split val --limit 60
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "synthvid"))
import synthvid  # noqa: E402


def keep_fraction(a, tau):
    s = np.sort(a)[::-1]
    c = np.cumsum(s)
    k = int(np.searchsorted(c, tau * c[-1]) + 1)
    return k / len(a)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--split", default="val")
    ap.add_argument("--limit", type=int, default=60)
    ap.add_argument("--tau", type=float, default=0.975)
    args = ap.parse_args()
    import torch
    from transformers import AutoProcessor, LlavaOnevisionForConditionalGeneration

    torch.set_num_threads(1)
    proc = AutoProcessor.from_pretrained(args.model)
    model = LlavaOnevisionForConditionalGeneration.from_pretrained(
        args.model, dtype=torch.float32, attn_implementation="eager").eval()
    vid = model.config.video_token_index
    with open(os.path.join(args.data, f"{args.split}.jsonl")) as f:
        recs = [json.loads(line) for line in f][:args.limit]
    per_layer_all, per_layer_vid, per_task, entropy, entropy_norm = {}, {}, {}, {}, {}
    for r in recs:
        question = r["turns"][0]["question"] if "turns" in r else r["question"]
        video = synthvid.read_mp4(os.path.join(args.data, r["video"]))
        conv = [{"role": "user", "content": [{"type": "video"},
                                             {"type": "text", "text": question}]}]
        text = proc.apply_chat_template(conv, add_generation_prompt=True, tokenize=False)
        inp = proc(text=text, videos=[video], return_tensors="pt")
        with torch.no_grad():
            out = model(**inp, output_attentions=True)
        is_vid = (inp["input_ids"][0] == vid).numpy()
        for li, att in enumerate(out.attentions):
            a = att[0, :, -1, :].sum(0).float().numpy()  # heads summed, last query
            per_layer_all.setdefault(li, []).append(keep_fraction(a, args.tau))
            av = a[is_vid]
            per_layer_vid.setdefault(li, []).append(keep_fraction(av, args.tau))
            if li == len(out.attentions) - 1:
                per_task.setdefault(r["task"], []).append(keep_fraction(av, args.tau))
            # Per head over the video tokens, renormalised.
            heads = att[0, :, -1, :].float().numpy()[:, is_vid]
            heads = heads / np.maximum(heads.sum(-1, keepdims=True), 1e-30)
            h = -(heads * np.log(np.maximum(heads, 1e-30))).sum(-1)
            entropy.setdefault(li, []).append(float(h.mean()))
            entropy_norm.setdefault(li, []).append(float(h.mean() / np.log(heads.shape[-1])))
    res = {"model": args.model, "items": len(recs), "tau": args.tau,
           "keep_fraction_all_tokens_per_layer": {k: round(float(np.mean(v)), 4)
                                                  for k, v in per_layer_all.items()},
           "keep_fraction_video_tokens_per_layer": {k: round(float(np.mean(v)), 4)
                                                    for k, v in per_layer_vid.items()},
           "video_attention_entropy_nats_per_layer": {k: round(float(np.mean(v)), 4)
                                                      for k, v in entropy.items()},
           "video_attention_entropy_over_log_n_per_layer": {
               k: round(float(np.mean(v)), 4) for k, v in entropy_norm.items()},
           "keep_fraction_video_tokens_last_layer_per_task": {
               k: round(float(np.mean(v)), 4) for k, v in sorted(per_task.items())}}
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
