#!/usr/bin/env python3
"""Where does the supervised retrieval head look, and does the answer follow?

For the questions of the val split's --tasks (videos of up to --max-frames frames), by task and
number of objects in the video: the retrieval head's attention mass, at the answer position, on
the tokens of the object the question names, and the teacher-forced exact-answer accuracy
(train.evaluate's rule). A mass near 1/objects means the head cannot tell the named object from
the others. For count questions also the mass on the object's last appearance (from its last
onset on, where the running count is the answer: the --retrieval-count-last target).

  diagnose_retrieval.py --run .data/train10 --layer 4 [--head 0] [--items 120]
  diagnose_retrieval.py --run .data/train17 --tasks count --max-frames 64 --items 100
"""

from __future__ import annotations

import argparse
import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fzmodel  # noqa: E402
import synthvid  # noqa: E402
import train  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", required=True, help="train.py run folder (its ckpt.pt)")
    ap.add_argument("--cache", default=".data/cache")
    ap.add_argument("--layer", type=int, default=4, help="retrieval layer (1-based)")
    ap.add_argument("--head", type=int, default=0)
    ap.add_argument("--items", type=int, default=120)
    ap.add_argument("--max-frames", type=int, default=24)
    ap.add_argument("--tasks", default="color,shape", help="comma-separated synthvid tasks")
    args = ap.parse_args()

    import torch
    from transformers import LlavaOnevisionForConditionalGeneration

    torch.set_num_threads(1)
    tok = fzmodel.wrap_tokenizer(fzmodel.build_tokenizer(fzmodel.ARCH["bpe_vocab"]))
    cfg = fzmodel.build_config(tok)
    cfg._attn_implementation = "eager"
    model = LlavaOnevisionForConditionalGeneration(cfg)
    model.load_state_dict(torch.load(os.path.join(args.run, "ckpt.pt"), weights_only=False)["model"])
    model.eval()
    tpf = fzmodel.video_tokens_per_frame()
    data = train.Data(args.cache, "val", tok, tpf, object_facts=True)  # the retrieval targets
    items = [it for it in data.items
             if it["task"] in args.tasks.split(",") and it["num_frames"] <= args.max_frames]
    items = items[:args.items]
    objects = {it["id"]: len(synthvid.make_scene("val", int(it["id"].split("-")[1]))[3])
               for it in items}
    captured = {}
    model.model.language_model.layers[args.layer - 1].self_attn.register_forward_hook(
        lambda _m, _i, output: captured.__setitem__("weights", output[1]))
    by_frames = collections.defaultdict(list)
    for it in items:
        by_frames[it["num_frames"]].append(it)
    stats = collections.defaultdict(list)
    with torch.no_grad():
        for group in by_frames.values():
            for i in range(0, len(group), 8):
                batch = group[i:i + 8]
                turns = [(it, [(it["question"], it["answer"])]) for it in batch]
                data.count_target = "last"
                last_mask = data.collate(turns)["retrieval"][2]  # differs for count questions only
                data.count_target = "object"
                b = data.collate(turns)
                b.pop("object_facts")
                rows, positions, key_mask = b.pop("retrieval")[:3]
                labels = b.pop("labels")
                logits = model(**b).logits
                pred, target = logits[:, :-1].argmax(-1), labels[:, 1:]
                correct = ((pred == target) | (target == -100)).all(-1)
                attn = captured["weights"][rows, args.head, positions]
                mass = (attn * key_mask).sum(-1)
                mass_last = (attn * last_mask).sum(-1)
                for k, r in enumerate(rows.tolist()):
                    it = batch[r]
                    stats[(it["task"], objects[it["id"]])].append(
                        (mass[k].item(), mass_last[k].item(), bool(correct[r])))
    print("task       objects  items  mass on the named object  on its last appearance  accuracy")
    for (task, n), v in sorted(stats.items()):
        last = f"{sum(m for _, m, _ in v) / len(v):.2f}" if task == "count" else "-"
        print(f"{task:10} {n:7} {len(v):6}  {sum(m for m, _, _ in v) / len(v):24.2f}  "
              f"{last:>22}  {sum(o for _, _, o in v) / len(v):8.2f}")


if __name__ == "__main__":
    main()
