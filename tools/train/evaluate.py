#!/usr/bin/env python3
"""Reference accuracy of an exported model on a synthvid split, through the public HF path only:
AutoProcessor + LlavaOnevisionForConditionalGeneration.from_pretrained, mp4 decoded with PyAV,
chat template, greedy generate. This is what `framezip eval` must reproduce.

  evaluate.py --model models/framezip-tiny-video --data .data/synthvid --split test \
      --out models/framezip-tiny-video/eval_test.json [--limit N] [--turn2]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "synthvid"))
import synthvid  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--split", default="test")
    ap.add_argument("--out", default=None)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--turn2", action="store_true",
                    help="also ask the first follow-up question as a second turn")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    import torch
    from transformers import AutoProcessor, LlavaOnevisionForConditionalGeneration

    torch.set_num_threads(args.threads)
    proc = AutoProcessor.from_pretrained(args.model)
    model = LlavaOnevisionForConditionalGeneration.from_pretrained(
        args.model, dtype=getattr(torch, args.dtype)).eval()
    with open(os.path.join(args.data, f"{args.split}.jsonl")) as f:
        recs = [json.loads(line) for line in f]
    if args.limit:
        recs = recs[:args.limit]

    def ask(conv, video):
        text = proc.apply_chat_template(conv, add_generation_prompt=True, tokenize=False)
        inp = proc(text=text, videos=[video], return_tensors="pt")
        inp["pixel_values_videos"] = inp["pixel_values_videos"].to(model.dtype)
        with torch.no_grad():
            out = model.generate(**inp, max_new_tokens=6, do_sample=False)
        return proc.tokenizer.decode(out[0, inp["input_ids"].shape[1]:],
                                     skip_special_tokens=True).strip()

    per_task, per_len, turn2, rows = {}, {}, [0, 0], []
    t0 = time.time()
    for r in recs:
        video = synthvid.read_mp4(os.path.join(args.data, r["video"]))
        assert len(video) == r["num_frames"]
        conv = [{"role": "user", "content": [{"type": "video"},
                                             {"type": "text", "text": r["question"]}]}]
        pred = ask(conv, video)
        ok = pred == r["answer"]
        c = per_task.setdefault(r["task"], [0, 0])
        c[0] += ok
        c[1] += 1
        c = per_len.setdefault(r["num_frames"], [0, 0])
        c[0] += ok
        c[1] += 1
        row = {"id": r["id"], "task": r["task"], "num_frames": r["num_frames"], "answer": r["answer"],
               "pred": pred, "ok": ok}
        if args.turn2:
            fups = [f for f in r["followups"] if f["question"] != r["question"]]
            if fups:
                conv += [{"role": "assistant", "content": [{"type": "text", "text": pred}]},
                         {"role": "user", "content": [{"type": "text", "text": fups[0]["question"]}]}]
                p2 = ask(conv, video)
                turn2[0] += p2 == fups[0]["answer"]
                turn2[1] += 1
                row.update(turn2_answer=fups[0]["answer"], turn2_pred=p2)
        rows.append(row)
    n = sum(c[1] for c in per_task.values())
    res = {
        "model": args.model, "split": args.split, "n": n, "dtype": args.dtype,
        "accuracy": sum(c[0] for c in per_task.values()) / max(1, n),
        "per_task": {t: {"acc": c[0] / c[1], "n": c[1]} for t, c in sorted(per_task.items())},
        "per_num_frames": {str(k): {"acc": c[0] / c[1], "n": c[1]} for k, c in sorted(per_len.items())},
        "seconds": round(time.time() - t0, 1),
    }
    if args.turn2:
        res["turn2_accuracy"] = turn2[0] / max(1, turn2[1])
        res["turn2_n"] = turn2[1]
    print(json.dumps(res, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(res, items=rows), f, indent=0)


if __name__ == "__main__":
    main()
