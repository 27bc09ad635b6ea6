#!/usr/bin/env python3
"""Trains framezip-tiny-video on synthvid v2 (+ v1) frames rendered in the DataLoader's workers,
on a GPU or the CPU, within a wall-clock budget.

train_v2.py's recipe (loss on every answer, a turn's tokens weighted 1/sqrt(its length), AdamW
with warm-up and a cosine on progress = max(step / max_steps, elapsed / budget)) without its
feature cache: the vision tower runs every step on frames drawn from the scene description
(render_data.py), so the tower and projector can train too (--trainable), no item repeats, and no
mp4, PyAV or cache is needed, which is what a GPU machine that gets only the working tree has.

  train_render.py --init-from models/framezip-tiny-video --ckpt-dir RUN --export EXPORT \\
      --time-budget-min 7 --device auto

On CUDA: bf16 autocast (weights and optimizer state stay fp32), fused AdamW, uint8 frames (each
run of equal frames once) pinned and normalised on the GPU. Chats of any length share rows (render_data.pack),
so a step is a fixed token budget. At start, the packed forward is checked against transformers'
own forward (processor + model on the raw frames) on a few val chats; at the end (and at every
checkpoint) the model is exported in bf16 (export.py: the shipped folder's layout).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import render_data as rd  # noqa: E402
from train import log  # noqa: E402


def tokens_per_frame(cfg):
    """Video tokens per frame: the patch grid pooled 2x2 (ceil), as get_video_features pools."""
    side = cfg.vision_config.image_size // cfg.vision_config.patch_size
    return ((side + 1) // 2) ** 2


def video_rows(model, frames, frame_index, video_index, grad):
    """What LlavaOnevisionModel splices into the <video> positions of a packed step, in order:
    get_video_features on the step's distinct frames at once (every frame is encoded and pooled
    on its own, so concatenating videos, or encoding a repeated frame once, changes nothing),
    each frame's rows (frame_index), then image_newline after each video (video_index)."""
    import torch
    cfg = model.config
    with torch.set_grad_enabled(grad):
        # Positional: transformers 5.17 (the GPU image's) names it pixel_values, 5.24 (our pin)
        # pixel_values_videos.
        out = model.model.get_video_features(
            frames[None], vision_feature_layer=cfg.vision_feature_layer,
            vision_feature_select_strategy=cfg.vision_feature_select_strategy)
    # 5.24 appends image_newline to pooler_output, 5.17 does not: keep the frames' rows only.
    tpf = tokens_per_frame(cfg)
    rows = out.pooler_output[0, :frames.shape[0] * tpf]
    rows = rows.view(frames.shape[0], tpf, -1)[frame_index].flatten(0, 1)
    newline = model.model.image_newline[None].to(rows.dtype)
    return torch.cat([rows, newline])[video_index]


def packed_logits(model, batch, frames, grad_vision):
    """Logits at the answer positions batch["pos"] of a packed step (render_data.pack)."""
    inner = model.model
    ids = batch["ids"]
    emb = inner.get_input_embeddings()(ids)
    rows = video_rows(model, frames, batch["frame_index"], batch["video_index"], grad_vision)
    is_video = (ids == model.config.video_token_index)[..., None]
    emb = emb.masked_scatter(is_video, rows.to(emb.dtype))
    # No attention mask and no cache: position ids that restart at 0 then give the block-diagonal
    # causal mask (with a cache, as eval mode makes by default, transformers skips that and the
    # chats of a row would see each other).
    h = inner.language_model(inputs_embeds=emb, position_ids=batch["position_ids"],
                             use_cache=False).last_hidden_state
    pos = batch["pos"]
    return model.lm_head(h[pos[:, 0], pos[:, 1]])


def to_device(batch, device):
    keys = ("ids", "position_ids", "frame_index", "video_index", "pos", "tgt", "weight")
    return dict(batch, **{k: batch[k].to(device, non_blocking=True) for k in keys})


def evaluate(model, data, specs, args, device, tpf, outcomes=None):
    """Teacher-forced exact match of every turn (earlier turns with their correct answers): a
    turn is right iff the argmax at each of its answer positions, <|im_end|> included, is the
    target, which is what greedy decoding needs to say exactly the answer and stop.
    outcomes, when a dict, gets {(spec, turn): 0|1}."""
    import torch
    model.eval()
    per_task, per_suite, per_turn = {}, {}, {}

    def add(d, k, ok):
        c = d.setdefault(k, [0, 0])
        c[0] += ok
        c[1] += 1

    steps = rd.plan_eval(specs, args.tokens_per_step * 2, tpf)
    it = rd.loader(data, steps, rd.Packer(args.row_tokens, data.renderer.pad_id, tpf), args.workers,
                   device.type == "cuda")
    with torch.no_grad(), autocast(device):
        for batch in it:
            frames = rd.to_chw_float(batch["frames"], device)
            batch = to_device(batch, device)
            logits = packed_logits(model, batch, frames, False)
            right = (logits.argmax(-1) == batch["tgt"]).cpu()
            keys = batch["key"]
            for key in keys.unique().tolist():
                i, t = divmod(key, 64)
                ok = int(bool(right[keys == key].all()))
                add(per_task, batch["tasks"][i], ok)
                add(per_suite, batch["suites"][i], ok)
                add(per_turn, f"{batch['suites'][i]}_t{'2+' if t else '1'}", ok)
                if outcomes is not None:
                    outcomes[(batch["specs"][i], t)] = ok
    model.train()

    def rate(d):
        return {k: round(c[0] / c[1], 4) for k, c in sorted(d.items())}

    n = sum(c[1] for c in per_suite.values())
    return {"acc": round(sum(c[0] for c in per_suite.values()) / max(1, n), 4), "turns": n,
            "per_suite": rate(per_suite), "per_turn": rate(per_turn), "per_task": rate(per_task)}


def autocast(device):
    import torch
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16,
                          enabled=device.type == "cuda")


def check_packed_forward(model, processor, data, device, tpf, count=4):
    """The packed, pre-rendered forward must equal transformers' own forward (the processor on
    the 128x128 frames, then the model) on a few val chats: same tokens, logits within 1e-3 in
    fp32 on the CPU, 1e-2 on CUDA (autocast off, TF32 off; the two paths batch the frames and
    rows differently, so their reductions differ). A wrong mask or splice is off by far more
    (test_render_data.py). Returns the largest |difference|."""
    import torch
    tf32 = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    from chat_render import template_conversation
    specs = rd.eval_specs(count - count // 2, count // 2)
    samples = [data[s] for s in specs]
    # All chats in one row with a padding tail: every chat but the first starts mid-row.
    batch = rd.pack(samples, sum(len(s["ids"]) for s in samples) + 7, data.renderer.pad_id, tpf)
    assert batch["ids"].shape[0] == 1
    model.eval()
    worst = 0.0
    with torch.no_grad():
        frames = rd.to_chw_float(batch["frames"], device)
        b = to_device(batch, device)
        got = packed_logits(model, b, frames, False)
        pos = batch["pos"]
        keys = batch["sample_of"][pos[:, 0], pos[:, 1]]
        for i, spec in enumerate(specs):
            rec, raw = rd.render_item(spec)
            turns = rd.turns_of(spec, rec)
            text = processor.apply_chat_template(template_conversation(turns), tokenize=False)
            inp = processor(text=text, videos=[raw], return_tensors="pt").to(device)
            mine = batch["ids"][batch["sample_of"] == i]
            assert inp["input_ids"][0].tolist() == mine.tolist(), \
                f"{spec}: packed token ids differ from the processor's"
            ref = model(**inp).logits[0]
            sel = keys == i
            start = (batch["sample_of"][pos[sel][0, 0]] == i).nonzero()[0, 0]
            err = (got[sel.to(device)] - ref[(pos[sel][:, 1] - start).to(device)]).abs().max().item()
            worst = max(worst, err)
    model.train()
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
    limit = 1e-2 if device.type == "cuda" else 1e-3
    assert worst < limit, f"packed forward differs from transformers' forward by {worst}"
    return worst


def load_model(args, device):
    """(model fp32 on device, processor): an exported folder, or a fresh model (fzmodel.py)."""
    import torch
    from transformers import AutoProcessor, LlavaOnevisionForConditionalGeneration
    if args.init_from:
        processor = AutoProcessor.from_pretrained(args.init_from)
        model = LlavaOnevisionForConditionalGeneration.from_pretrained(
            args.init_from, dtype=torch.float32, attn_implementation="sdpa")
    else:
        import fzmodel
        tok = fzmodel.wrap_tokenizer(fzmodel.build_tokenizer(fzmodel.ARCH["bpe_vocab"]))
        processor = fzmodel.build_processor(tok)
        cfg = fzmodel.build_config(tok)
        cfg._attn_implementation = "sdpa"
        torch.manual_seed(args.seed)
        model = LlavaOnevisionForConditionalGeneration(cfg)
    return model.to(device).train(), processor


def set_trainable(model, which):
    """decoder: decoder, embeddings and image_newline (train_v2.py's recipe); projector: also the
    projector; all: the vision tower too."""
    inner = model.model
    frozen = {"decoder": [inner.vision_tower, inner.multi_modal_projector],
              "projector": [inner.vision_tower], "all": []}[which]
    for m in frozen:
        for p in m.parameters():
            p.requires_grad_(False)
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--init-from", metavar="DIR", help="exported model folder to continue from")
    src.add_argument("--from-scratch", action="store_true",
                     help="a freshly initialised model (fzmodel.py's architecture and tokenizer)")
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--ckpt-dir", required=True, help="ckpt.pt (model + optimizer + state) and "
                                                      "the log go here")
    ap.add_argument("--export", required=True, help="bf16 model folder (at each checkpoint)")
    ap.add_argument("--resume", action="store_true", help="continue from --ckpt-dir/ckpt.pt")
    ap.add_argument("--time-budget-min", type=float, default=7.0,
                    help="wall-clock minutes of training (evaluation and export come on top)")
    ap.add_argument("--end-by", type=float, default=0.0,
                    help="Unix time by which training must stop (the budget shrinks to fit; "
                         "scripts/gpu-train.sh passes its own deadline minus the final "
                         "evaluation and export)")
    ap.add_argument("--max-steps", type=int, default=10 ** 7)
    ap.add_argument("--ckpt-every-min", type=float, default=2.0)
    ap.add_argument("--log-every", type=int, default=20, help="steps per train record")
    ap.add_argument("--eval-every-min", type=float, default=0.0, help="0: at start and end only")
    ap.add_argument("--no-eval-at-start", action="store_true")
    ap.add_argument("--tokens-per-step", type=int, default=65536)
    ap.add_argument("--row-tokens", type=int, default=4096,
                    help="packed row length (a 512-frame chat, the longest, is ~2150)")
    ap.add_argument("--workers", type=int, default=-1, help="render processes (-1: the usable cores, "
                                                          "at most 16, less 2)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads in the main process "
                                                           "(0: 1 on the CPU, 4 with CUDA)")
    ap.add_argument("--trainable", default="decoder", choices=["decoder", "projector", "all"])
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--weight-decay", type=float, default=0.05)
    ap.add_argument("--v1-share", type=float, default=0.5,
                    help="fraction of chats from synthvid v1 (short videos, ~12%% of the tokens "
                         "at 0.5), so v1's questions are not forgotten")
    ap.add_argument("--task-weights", default="", help="v2 task sampling weights, e.g. "
                                                       "'after=2,count_long=2' (others 1)")
    ap.add_argument("--extra-turns", type=int, default=0,
                    help="training-only questions added after each v2 chat's own turns "
                         "(render_data.scene_questions: counts and orders of its objects), so a "
                         "rendered video teaches more answers; 0 = off")
    ap.add_argument("--max-frames", type=int, default=0, help="train only on videos up to this "
                                                               "many frames (0: all)")
    ap.add_argument("--val-v2", type=int, default=240)
    ap.add_argument("--val-v1", type=int, default=300)
    ap.add_argument("--check-chats", type=int, default=4,
                    help="val chats of the start-up check against transformers' forward (0: off)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import torch
    import transformers

    os.nice(int(os.environ.get("NICE", "0")))
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: this torch sees no CUDA device")
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    if args.workers < 0:
        # The cores this process may use (a container can report the host's count), at most 16
        # (the GPU machine's), less the main process and the pin-memory thread.
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 2
        args.workers = max(1, min(cores, 16) - 2)
    torch.set_num_threads(args.threads or (4 if cuda else 1))
    torch.manual_seed(args.seed)
    os.makedirs(args.ckpt_dir, exist_ok=True)
    t_setup = time.time()
    model, processor = load_model(args, device)
    tpf = tokens_per_frame(model.config)
    data = rd.RenderedChats(processor.tokenizer, processor.video_processor, tpf,
                            extra_turns=args.extra_turns)
    trainable = set_trainable(model, args.trainable)
    decayed = [p for n, p in trainable if p.ndim >= 2 and "embed" not in n]
    other = [p for n, p in trainable if not (p.ndim >= 2 and "embed" not in n)]
    opt = torch.optim.AdamW([{"params": decayed, "weight_decay": args.weight_decay},
                             {"params": other, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.98), eps=1e-8, fused=cuda)
    ckpt_path = os.path.join(args.ckpt_dir, "ckpt.pt")
    log_path = os.path.join(args.ckpt_dir, "training_log_render.jsonl")
    state = {"step": 0, "samples": 0, "elapsed": 0.0, "tokens": 0}
    if args.resume:
        if not os.path.exists(ckpt_path):
            ap.error(f"--resume: no checkpoint at {ckpt_path}")
        ck = torch.load(ckpt_path, weights_only=False, map_location=device)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        state = ck["state"]
    fh = open(log_path, "a" if args.resume else "w")
    check_err = (check_packed_forward(model, processor, data, device, tpf, args.check_chats)
                 if args.check_chats else None)
    val_specs = rd.eval_specs(args.val_v2, args.val_v1)
    log(fh, {"type": "config", "args": vars(args), "torch": torch.__version__,
             "transformers": transformers.__version__,
             "device_name": torch.cuda.get_device_name(0) if cuda else "cpu",
             "trainable_params": sum(p.numel() for _, p in trainable),
             "packed_check_max_abs_err": check_err, "setup_s": round(time.time() - t_setup, 1),
             "resumed_at_step": state["step"] if args.resume else None})
    if not args.no_eval_at_start and not args.resume:
        t = time.time()
        log(fh, {"type": "val", "step": state["step"], **evaluate(model, data, val_specs, args,
                                                                  device, tpf),
                 "eval_s": round(time.time() - t, 1)})

    plan = rd.StepPlan(state["step"], seed=args.seed, tokens=args.tokens_per_step, tpf=tpf,
                       v1_share=args.v1_share, task_weights=rd.parse_weights(args.task_weights),
                       max_frames=args.max_frames)
    it = iter(rd.loader(data, plan, rd.Packer(args.row_tokens, data.renderer.pad_id, tpf),
                        args.workers, cuda))
    budget = args.time_budget_min * 60
    if args.end_by:
        budget = min(budget, state["elapsed"] + args.end_by - time.time())
        if budget <= state["elapsed"]:
            sys.exit(f"--end-by: no time left to train ({args.end_by - time.time():.0f} s)")
    t_start = time.time() - state["elapsed"]
    last_ckpt = last_eval = time.time()
    acc = {"loss": 0.0, "n": 0, "wait": 0.0, "real": 0, "rows": 0, "frames": 0, "distinct": 0,
           "t": time.time()}

    def progress():
        return max(state["step"] / args.max_steps, (time.time() - t_start) / budget)

    def checkpoint(final=False):
        # The final checkpoint keeps the training time (the validation before it is not spent
        # on the budget of a resumed run).
        if not final:
            state["elapsed"] = time.time() - t_start
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "state": state,
                    "args": vars(args)}, ckpt_path + ".tmp")
        os.replace(ckpt_path + ".tmp", ckpt_path)
        from export import export_model  # noqa: PLC0415
        export_model(model, processor, args.export, extra_files=[log_path])
        log(fh, {"type": "checkpoint", "step": state["step"], "final": final,
                 "elapsed_s": round(state["elapsed"], 1)})

    grad_vision = args.trainable == "all"
    while progress() < 1.0:
        t_wait = time.time()
        batch = next(it)
        acc["wait"] += time.time() - t_wait
        frames = rd.to_chw_float(batch["frames"], device)
        b = to_device(batch, device)
        p = progress()
        warm = min(1.0, (state["step"] + 1) / args.warmup)
        lr = args.lr * warm * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(p, 1.0))))
        for g in opt.param_groups:
            g["lr"] = lr
        with autocast(device):
            logits = packed_logits(model, b, frames, grad_vision)
        ce = torch.nn.functional.cross_entropy(logits.float(), b["tgt"], reduction="none")
        # A turn's tokens weigh 1/sqrt(its length): a 50-token description counts ~7 one-word
        # answers (train_v2.py).
        w = b["weight"]
        loss = (w * ce).sum() / w.sum()
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_([q for _, q in trainable], 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        state["step"] += 1
        state["samples"] += len(batch["tasks"])
        state["tokens"] += batch["real_tokens"]
        acc["loss"] += loss.detach()
        acc["n"] += 1
        acc["real"] += batch["real_tokens"]
        acc["rows"] += batch["row_tokens"]
        acc["frames"] += len(batch["frame_index"])
        acc["distinct"] += len(batch["frames"])
        if state["step"] % args.log_every == 0:
            dt = time.time() - acc["t"]
            log(fh, {"type": "train", "step": state["step"], "samples": state["samples"],
                     "loss": round(float(acc["loss"]) / acc["n"], 5), "lr": round(lr, 7),
                     "grad_norm": round(float(gn), 4),
                     "padding": round(1 - acc["real"] / acc["rows"], 4),
                     "tokens_per_s": round(acc["real"] / dt), "frames_per_s": round(acc["frames"] / dt),
                     "distinct_frames": round(acc["distinct"] / acc["frames"], 4),
                     "data_wait": round(acc["wait"] / dt, 3),
                     "elapsed_s": round(time.time() - t_start, 1), "progress": round(p, 4)})
            acc = {"loss": 0.0, "n": 0, "wait": 0.0, "real": 0, "rows": 0, "frames": 0,
                   "distinct": 0, "t": time.time()}
        if time.time() - last_ckpt > args.ckpt_every_min * 60:
            checkpoint()
            last_ckpt = time.time()
        if args.eval_every_min and time.time() - last_eval > args.eval_every_min * 60:
            log(fh, {"type": "val", "step": state["step"],
                     **evaluate(model, data, val_specs, args, device, tpf)})
            last_eval = time.time()
    del it  # stops the render workers before the evaluation starts its own
    train_s = state["elapsed"] = time.time() - t_start
    log(fh, {"type": "end", "step": state["step"], "samples": state["samples"],
             "tokens": state["tokens"], "train_s": round(train_s, 1),
             "budget_s": round(budget, 1),
             "ended_by": "steps" if state["step"] >= args.max_steps else "time"})
    t = time.time()
    log(fh, {"type": "val", "step": state["step"], "final": True,
             **evaluate(model, data, val_specs, args, device, tpf),
             "eval_s": round(time.time() - t, 1)})
    checkpoint(final=True)


if __name__ == "__main__":
    main()
