#!/usr/bin/env python3
"""Fine-tunes an exported framezip-tiny-video on synthvid v2 (long videos, multi-turn sessions,
descriptions), mixed with synthvid v1 so that v1's questions are not forgotten.

The vision tower and projector stay frozen (the v1 recipe already froze the tower); their output
comes from prepare_features.py's cache, so a step costs only the decoder. The decoder, its
embeddings and `image_newline` train on the answers alone: no probe and no retrieval target, so
attention goes wherever answering needs it: the v1 recipe's probes made every video token read the
earlier frames, which no pretrained VLM does and which hides what the compression methods save
(README.md, "synthvid v2 fine-tuning"). `--evidence-weight` adds one supervised attention head
that looks at each answer's evidence frames (evidence.py): a few frames of a long video, where
attention in a pretrained VLM concentrates too.

  train_v2.py --model models/framezip-tiny-video --cache2 .data/features2 --cache1 .data/features1 \
      --out .data/train_v2 --export .data/export_v2

Every turn of a v2 item is trained (its answers follow from the video and the earlier correct
answers); a v1 item gets its question plus 0-3 follow-ups, as in train.py. A turn's tokens weigh
1/sqrt(answer tokens), so a 50-token description counts about 7 times a one-word answer, not 50
times. The learning rate follows progress = max(step / max_steps, elapsed / time_budget), as in
train.py, so a slow machine still ends with a decayed rate. Validation is teacher-forced exact
match per turn (greedy decoding would say exactly the answer and stop), per task and per length.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chat_render import CachedEncoder, render_turns, template_conversation  # noqa: E402
from evidence import EvidenceTargets, evidence_loss  # noqa: E402
from train import log, sample_turns  # noqa: E402


class FeatureSplit:
    """A split cached by prepare_features.py: records and their video rows."""

    def __init__(self, cache_dir, split, suite):
        with open(os.path.join(cache_dir, f"{split}.json")) as f:
            meta = json.load(f)
        self.items = meta["items"]
        for it in self.items:
            it["_split"] = self
        self.suite = suite
        self.tpf = meta["tokens_per_frame"]
        self.rows = np.memmap(os.path.join(cache_dir, f"{split}.f16"), dtype=np.float16, mode="r",
                              shape=(meta["total_rows"], meta["hidden"]))

    def video_rows(self, it):
        n = it["num_frames"] * self.tpf
        return np.asarray(self.rows[it["offset"]:it["offset"] + n], dtype=np.float32)


def item_turns(rng, it):
    """[(question, answer)]: every turn of a v2 item; a v1 item's question and some follow-ups."""
    if "turns" in it:
        return [(t["question"], t["answer"]) for t in it["turns"]]
    return sample_turns(rng, it)


class Renderer:
    """Token ids and labels of a chat exactly as the model's chat template writes it."""

    def __init__(self, tok):
        self.tok = tok
        self.video_id = tok.convert_tokens_to_ids("<video>")
        self.pad_id = tok.convert_tokens_to_ids("<|endoftext|>")
        self.enc = CachedEncoder(tok)

    def render(self, turns, video_tokens):
        """(ids, labels, turn_of_label, text) of chat_render.render_turns, with the <video>
        placeholder expanded to `video_tokens` positions (labels -100, turn -1)."""
        ids, labels, turn_of, text = render_turns(self.enc, turns)
        if video_tokens:
            j = ids.index(self.video_id)
            ids = ids[:j] + [self.video_id] * video_tokens + ids[j + 1:]
            labels = labels[:j] + [-100] * video_tokens + labels[j + 1:]
            turn_of = turn_of[:j] + [-1] * video_tokens + turn_of[j + 1:]
        return ids, labels, turn_of, text


def collate(renderer, batch):
    """batch: [(item, turns)] of equal num_frames -> tensors (right-padded)."""
    import torch
    seqs = []
    for it, turns in batch:
        split = it["_split"]
        seqs.append(renderer.render(turns, it["num_frames"] * split.tpf + 1))
    L = max(len(s[0]) for s in seqs)
    B = len(seqs)
    ids = torch.full((B, L), renderer.pad_id, dtype=torch.long)
    labels = torch.full((B, L), -100, dtype=torch.long)
    turn_of = torch.full((B, L), -1, dtype=torch.long)
    mask = torch.zeros((B, L), dtype=torch.long)
    for b, (i, lab, t, _) in enumerate(seqs):
        ids[b, :len(i)] = torch.tensor(i)
        labels[b, :len(lab)] = torch.tensor(lab)
        turn_of[b, :len(t)] = torch.tensor(t)
        mask[b, :len(i)] = 1
    video = torch.from_numpy(np.concatenate([it["_split"].video_rows(it) for it, _ in batch]))
    return ids, labels, turn_of, mask, video


def splice_video(model, ids, video):
    """The input embeddings of the chat in `ids` with the video tokens taken from `video` (rows in
    batch order, each video's newline appended here): the same splice as
    LlavaOnevisionModel.forward (masked_scatter over the <video> positions)."""
    import torch
    inner = model.model
    emb = inner.get_input_embeddings()(ids)
    B = ids.shape[0]
    per = video.shape[0] // B
    rows = video.view(B, per, -1).to(emb.dtype)
    rows = torch.cat([rows, inner.image_newline[None, None, :].expand(B, 1, -1)], dim=1)
    is_video = (ids == model.config.video_token_index)[..., None]
    return emb.masked_scatter(is_video, rows.reshape(-1, rows.shape[-1]))


def forward_logits(model, ids, mask, video, positions):
    """Logits at `positions` ([N, 2] batch/position pairs) of the chat in `ids` (splice_video)."""
    emb = splice_video(model, ids, video)
    h = model.model.language_model(inputs_embeds=emb, attention_mask=mask).last_hidden_state
    return model.lm_head(h[positions[:, 0], positions[:, 1]])


def answer_positions(labels):
    """([N, 2] positions whose next token is labelled, [N] those next tokens)."""
    import torch
    nxt = labels[:, 1:]
    pos = (nxt != -100).nonzero()
    return pos, nxt[pos[:, 0], pos[:, 1]]


def make_batches(rng, items, tokens_per_batch):
    """Batches of equal frame count (the cached rows splice per video), about tokens_per_batch
    video tokens each, shuffled."""
    by_f = {}
    for it in items:
        by_f.setdefault((it["num_frames"], it["_split"].suite), []).append(it)
    batches = []
    for (F, _), its in by_f.items():
        its = its[:]
        rng.shuffle(its)
        bs = max(1, tokens_per_batch // (F * its[0]["_split"].tpf + 1))
        batches += [its[i:i + bs] for i in range(0, len(its), bs)]
    rng.shuffle(batches)
    return batches


def evaluate(model, renderer, items, tokens_per_batch):
    """Teacher-forced exact match of every turn (earlier turns with their correct answers).
    Returns {"acc", "n", "per_task", "per_length", "per_turn"}."""
    import torch
    model.eval()
    tallies = {"per_task": {}, "per_length": {}, "per_turn": {}}
    total = [0, 0]

    def add(kind, key, ok):
        c = tallies[kind].setdefault(key, [0, 0])
        c[0] += ok
        c[1] += 1

    with torch.no_grad():
        for batch in make_batches(random.Random(0), items, tokens_per_batch):
            # v2: every turn; v1: its own question alone, as v1's evaluation asks it.
            turns = [item_turns(None, it) if "turns" in it else [(it["question"], it["answer"])]
                     for it in batch]
            ids, labels, turn_of, mask, video = collate(renderer, list(zip(batch, turns)))
            pos, tgt = answer_positions(labels)
            pred = forward_logits(model, ids, mask, video, pos).argmax(-1)
            right = (pred == tgt)
            which = turn_of[pos[:, 0], pos[:, 1] + 1]
            for b, it in enumerate(batch):
                for t in range(len(turns[b])):
                    sel = (pos[:, 0] == b) & (which == t)
                    ok = int(bool(right[sel].all()))
                    task = it["task"] if "turns" in it else "v1_" + it["task"]
                    add("per_task", task, ok)
                    add("per_turn", f"{it['_split'].suite}_t{min(t + 1, 2)}{'+' if t else ''}", ok)
                    if "turns" in it:
                        add("per_length", str(it["num_frames"]), ok)
                    total[0] += ok
                    total[1] += 1
    model.train()
    out = {"acc": round(total[0] / max(1, total[1]), 4), "n": total[1]}
    for kind, t in tallies.items():
        out[kind] = {k: round(c[0] / c[1], 4) for k, c in sorted(t.items())}
    return out


def check_splice(model, processor, renderer, it, data_dir):
    """The cached-feature forward must equal transformers' own forward on the mp4."""
    import torch
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "synthvid"))
    import synthvid  # noqa: PLC0415
    frames = synthvid.read_mp4(os.path.join(data_dir, it["video"]))
    turns = item_turns(random.Random(0), it)
    text = processor.apply_chat_template(template_conversation(turns), tokenize=False)
    inp = processor(text=text, videos=[frames], return_tensors="pt")
    ids, labels, _, mask, video = collate(renderer, [(it, turns)])
    ours = renderer.render(turns, 0)[3]
    assert ours == text, (ours, text)
    assert inp["input_ids"][0].tolist() == ids[0].tolist(), "token ids differ from the processor's"
    with torch.no_grad():
        ref = model(**inp).logits[0]
        pos, _ = answer_positions(labels)
        got = forward_logits(model, ids, mask, video, pos)
    err = (got - ref[pos[:, 1]]).abs().max().item()
    # The cache holds float16 rows: differences of about 1e-3 of a logit, not more.
    assert err < 2e-2, f"cached-feature logits differ from transformers' by {err}"
    return err


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", required=True, help="exported model folder to start from")
    ap.add_argument("--cache2", required=True, help="prepare_features.py cache of synthvid v2")
    ap.add_argument("--cache1", default=None, help="the same for synthvid v1 (optional)")
    ap.add_argument("--cache2-extra", action="append", default=[], metavar="CACHE",
                    help="another v2 cache whose train split adds items (synthvid2.py --start "
                         "past the first set's indices); repeatable")
    ap.add_argument("--data2", default=".data/synthvid2", help="v2 mp4s, for the splice check")
    ap.add_argument("--out", required=True, help="run folder: log, checkpoint")
    ap.add_argument("--export", required=True, help="model folder written at each validation")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-steps", type=int, default=100000)
    ap.add_argument("--time-budget-min", type=float, default=75.0)
    ap.add_argument("--tokens-per-batch", type=int, default=2100,
                    help="video tokens per batch (one 512-frame video is 2049)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--weight-decay", type=float, default=0.05)
    ap.add_argument("--eval-every-min", type=float, default=12.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--v1-repeat", type=int, default=1,
                    help="each v1 training item appears this many times per epoch: v1 batches "
                         "hold many short videos, so at 1 they are only ~5%% of the steps")
    ap.add_argument("--task-repeat", default="",
                    help="extra copies per epoch of the v2 items of some tasks, e.g. "
                         "'after=3,count_long=2': the tasks still far from their bar get more "
                         "steps than the ones already learned")
    ap.add_argument("--evidence-weight", type=float, default=0.0,
                    help="weight of the evidence attention loss (evidence.py): one head is "
                         "trained to look at the frames holding each answer's evidence; 0 = off")
    ap.add_argument("--evidence-layer", type=int, default=4,
                    help="decoder layer (1-based) of the evidence head")
    ap.add_argument("--evidence-head", type=int, default=0)
    ap.add_argument("--resume", action="store_true")
    args = ap.parse_args()
    task_repeat = {k: int(v) for k, v in
                   (kv.split("=") for kv in args.task_repeat.split(",") if kv)}

    import torch
    import transformers
    from transformers import AutoProcessor, LlavaOnevisionForConditionalGeneration

    os.nice(19)
    torch.set_num_threads(args.threads)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    os.makedirs(args.out, exist_ok=True)
    processor = AutoProcessor.from_pretrained(args.model)
    # The evidence loss reads one head's attention probabilities, which only eager attention
    # returns; eager everywhere keeps one causal mask construction for every layer.
    model = LlavaOnevisionForConditionalGeneration.from_pretrained(
        args.model, dtype=torch.float32,
        attn_implementation="eager" if args.evidence_weight > 0 else "sdpa")
    model.train()
    for p in list(model.model.vision_tower.parameters()) + \
            list(model.model.multi_modal_projector.parameters()):
        p.requires_grad_(False)
    renderer = Renderer(processor.tokenizer)
    evidence_attn = {}
    if args.evidence_weight > 0:
        evidence = EvidenceTargets(processor.tokenizer)
        layers = model.model.language_model.layers
        if not 1 <= args.evidence_layer <= len(layers):
            ap.error(f"--evidence-layer {args.evidence_layer}: the decoder has {len(layers)} "
                     "layers (1-based)")
        heads = model.config.text_config.num_attention_heads
        if not 0 <= args.evidence_head < heads:
            ap.error(f"--evidence-head {args.evidence_head}: the decoder has {heads} heads "
                     "(0-based)")
        layers[args.evidence_layer - 1].self_attn.register_forward_hook(
            lambda _module, _inputs, output: evidence_attn.__setitem__("weights", output[1]))

    splits = {"v2_train": FeatureSplit(args.cache2, "train", "v2"),
              "v2_val": FeatureSplit(args.cache2, "val", "v2")}
    if args.cache1:
        splits["v1_train"] = FeatureSplit(args.cache1, "train", "v1")
        splits["v1_val"] = FeatureSplit(args.cache1, "val", "v1")
    for j, extra in enumerate(args.cache2_extra):
        splits[f"v2x{j}_train"] = FeatureSplit(extra, "train", "v2")
    train_items = [it for k, s in splits.items() if k.endswith("train")
                   for it in s.items * (args.v1_repeat if s.suite == "v1" else 1)]
    train_items += [it for k, s in splits.items() if k.endswith("train") and s.suite == "v2"
                    for it in s.items for _ in range(task_repeat.get(it["task"], 1) - 1)]
    val_items = [it for k, s in splits.items() if k.endswith("val") for it in s.items]
    splice_err = check_splice(model, processor, renderer, splits["v2_val"].items[0], args.data2)

    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    decayed = [p for n, p in trainable if p.ndim >= 2 and "embed" not in n]
    other = [p for n, p in trainable if not (p.ndim >= 2 and "embed" not in n)]
    opt = torch.optim.AdamW([{"params": decayed, "weight_decay": args.weight_decay},
                             {"params": other, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.98), eps=1e-8)
    ckpt_path = os.path.join(args.out, "ckpt.pt")
    log_path = os.path.join(args.out, "training_log_v2.jsonl")
    state = {"step": 0, "epoch": 0, "elapsed": 0.0, "samples": 0, "batch_index": 0}
    if args.resume and os.path.exists(ckpt_path):
        ck = torch.load(ckpt_path, weights_only=False)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        state = ck["state"]
    fh = open(log_path, "a" if args.resume else "w")
    if not args.resume:
        log(fh, {"type": "config", "args": vars(args), "torch": torch.__version__,
                 "transformers": transformers.__version__, "splice_max_abs_err": splice_err,
                 "train_items": len(train_items), "val_items": len(val_items),
                 "trainable_params": sum(p.numel() for _, p in trainable)})
        log(fh, {"type": "val", "step": 0, **evaluate(model, renderer, val_items,
                                                      args.tokens_per_batch * 2)})

    budget = args.time_budget_min * 60
    t_start = time.time() - state["elapsed"]
    last_eval = time.time()
    rng = random.Random(args.seed * 1000 + state["epoch"])
    batches = make_batches(rng, train_items, args.tokens_per_batch)
    bi = state["batch_index"]
    loss_acc, n_acc = 0.0, 0
    ev_acc = [0.0, 0]  # evidence attention mass: sum, batches

    def progress():
        return max(state["step"] / args.max_steps, (time.time() - t_start) / budget)

    def save_and_eval(final=False):
        state["elapsed"] = time.time() - t_start
        res = evaluate(model, renderer, val_items, args.tokens_per_batch * 2)
        log(fh, {"type": "val", "step": state["step"], "epoch": state["epoch"],
                 "samples": state["samples"], "elapsed_s": round(state["elapsed"], 1),
                 "final": final, **res})
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(),
                    "state": dict(state, batch_index=bi)}, ckpt_path + ".tmp")
        os.replace(ckpt_path + ".tmp", ckpt_path)
        from export import export_model  # noqa: PLC0415
        export_model(model, processor, args.export, extra_files=[log_path])

    while progress() < 1.0:
        if bi >= len(batches):
            state["epoch"] += 1
            rng = random.Random(args.seed * 1000 + state["epoch"])
            batches = make_batches(rng, train_items, args.tokens_per_batch)
            bi = 0
        batch = batches[bi]
        bi += 1
        srng = random.Random(hash((args.seed, state["step"])) & 0xFFFFFFFF)
        with_turns = [(it, item_turns(srng, it)) for it in batch]
        ids, labels, turn_of, mask, video = collate(renderer, with_turns)
        p = progress()
        warm = min(1.0, (state["step"] + 1) / args.warmup)
        lr = args.lr * warm * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(p, 1.0))))
        for g in opt.param_groups:
            g["lr"] = lr
        pos, tgt = answer_positions(labels)
        logits = forward_logits(model, ids, mask, video, pos)
        ce = torch.nn.functional.cross_entropy(logits, tgt, reduction="none")
        # Weight 1/sqrt(n) per token of an n-token answer (see the module docstring).
        key = pos[:, 0] * 64 + turn_of[pos[:, 0], pos[:, 1] + 1]
        _, inverse, counts = torch.unique(key, return_inverse=True, return_counts=True)
        w = counts[inverse].float().rsqrt()
        loss = (w * ce).sum() / w.sum()
        answer_loss = loss.item()
        targets = (evidence.build(with_turns, ids, labels, turn_of, renderer.video_id,
                                  batch[0]["_split"].tpf) if args.evidence_weight > 0 else None)
        if targets is not None:
            ev_loss, ev_mass = evidence_loss(evidence_attn["weights"], args.evidence_head, targets)
            loss = loss + args.evidence_weight * ev_loss
            ev_acc[0] += ev_mass.item()
            ev_acc[1] += 1
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_([p for _, p in trainable], 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        state["step"] += 1
        state["samples"] += len(batch)
        loss_acc += answer_loss
        n_acc += 1
        if state["step"] % 20 == 0:
            extra = ({"evidence_mass": round(ev_acc[0] / ev_acc[1], 4)} if ev_acc[1] else {})
            ev_acc[:] = [0.0, 0]
            log(fh, {"type": "train", "step": state["step"], "epoch": state["epoch"],
                     "samples": state["samples"], "loss": round(loss_acc / n_acc, 5), **extra,
                     "lr": round(lr, 7), "grad_norm": round(float(gn), 4),
                     "elapsed_s": round(time.time() - t_start, 1), "progress": round(p, 4)})
            loss_acc, n_acc = 0.0, 0
        if time.time() - last_eval > args.eval_every_min * 60:
            save_and_eval()
            last_eval = time.time()
    log(fh, {"type": "end", "step": state["step"],
             "ended_by": "steps" if state["step"] >= args.max_steps else "time"})
    save_and_eval(final=True)


if __name__ == "__main__":
    main()
