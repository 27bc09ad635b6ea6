#!/usr/bin/env python3
"""Trains framezip-tiny-video (transformers' LlavaOnevisionForConditionalGeneration) on synthvid.

Loss only on assistant answers and their <|im_end|>. Batches hold videos of one frame count (the
HF video path needs equal F per batch). The learning-rate schedule follows
progress = max(step / max_steps, elapsed / time_budget), so a slow machine still finishes with a
decayed learning rate; with an ample time budget the run is step-bound and reproducible from the
seed. Checkpoints + a bf16 export are written at every validation.
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
import fzmodel  # noqa: E402
from chat_render import CachedEncoder, render_turns, template_conversation  # noqa: E402
import object_targets  # noqa: E402
import synthvid  # noqa: E402


def log(fh, rec):
    rec = dict(rec, time=round(time.time(), 1))
    fh.write(json.dumps(rec) + "\n")
    fh.flush()
    print(json.dumps(rec), flush=True)


class Data:
    def __init__(self, cache_dir, split, tok, tpf, object_facts=False):
        with open(os.path.join(cache_dir, f"{split}.json")) as f:
            meta = json.load(f)
        self.items = meta["items"]
        # Per-item [F * tpf, WIDTH] object facts for the auxiliary probes (object_targets.py),
        # from re-running the deterministic scene generator (no rendering).
        self.facts = None
        # The retrieval target of count questions: "object" (all of the named object's tokens),
        # "last" (its last appearance, --retrieval-count-last) or "none" (--retrieval-skip-count).
        self.count_target = "object"
        if object_facts:
            grid = math.isqrt(tpf)
            self.facts = {}
            for it in self.items:
                index = int(it["id"].split("-")[1])
                _, _, F, objs, _, _, _ = synthvid.make_scene(split, index)
                assert F == it["num_frames"], it["id"]
                self.facts[it["id"]] = object_targets.scene_targets(objs, F, grid).reshape(
                    F * tpf, object_targets.WIDTH)
        S = meta["image_size"]
        self.frames = np.memmap(os.path.join(cache_dir, f"{split}.u8"), dtype=np.uint8, mode="r",
                                shape=(meta["total_frames"], 3, S, S))
        self.tok = tok
        self.tpf = tpf
        self.video_id = tok.convert_tokens_to_ids("<video>")
        self.eos_id = tok.convert_tokens_to_ids("<|im_end|>")
        self.pad_id = tok.convert_tokens_to_ids("<|endoftext|>")
        self.enc = CachedEncoder(tok)

    def render(self, turns):
        """turns: [(question, answer)]; first turn carries the video. Returns (ids, labels, text)."""
        ids, labels, _, text = render_turns(self.enc, turns)
        return ids, labels, text

    def expand(self, ids, labels, F):
        n = F * self.tpf + 1
        j = ids.index(self.video_id)
        return (ids[:j] + [self.video_id] * n + ids[j + 1:],
                labels[:j] + [-100] * n + labels[j + 1:])

    def pixels(self, it):
        import torch
        a = np.asarray(self.frames[it["offset"]:it["offset"] + it["num_frames"]])
        return (torch.from_numpy(a.copy()).float() - 127.5) / 127.5

    def collate(self, batch):
        """batch: [(item, turns)] with equal num_frames."""
        import torch
        F = batch[0][0]["num_frames"]
        seqs = []
        for it, turns in batch:
            assert it["num_frames"] == F
            ids, labels, _ = self.render(turns)
            seqs.append(self.expand(ids, labels, F))
        L = max(len(s[0]) for s in seqs)
        B = len(seqs)
        input_ids = torch.full((B, L), self.pad_id, dtype=torch.long)
        labels = torch.full((B, L), -100, dtype=torch.long)
        mask = torch.zeros((B, L), dtype=torch.long)
        for b, (i, l) in enumerate(seqs):
            input_ids[b, :len(i)] = torch.tensor(i)
            labels[b, :len(l)] = torch.tensor(l)
            mask[b, :len(i)] = 1
        pv = torch.stack([self.pixels(it) for it, _ in batch])
        out = dict(input_ids=input_ids, attention_mask=mask, labels=labels, pixel_values_videos=pv)
        if self.facts is not None:
            facts = torch.zeros((B, L, object_targets.WIDTH))
            for b, (it, _) in enumerate(batch):
                j = seqs[b][0].index(self.video_id)
                f = self.facts[it["id"]]
                facts[b, j:j + len(f)] = torch.from_numpy(f)
            out["object_facts"] = facts
            out["retrieval"] = self.retrieval_targets(batch, seqs, L)
        return out

    def retrieval_targets(self, batch, seqs, L):
        """(batch row, position, key mask [L], named colour, named shape, count) for every turn
        whose question names an object: the position is the last prompt token, whose next-token
        prediction starts the answer; colour/shape are object_targets.named_words'; count is the
        answer of a count question, -1 for the others."""
        import torch
        rows, positions, masks, named, counts = [], [], [], [], []
        for b, (it, turns) in enumerate(batch):
            ids, labels = seqs[b]
            starts = [t for t in range(1, len(labels)) if labels[t] != -100 and labels[t - 1] == -100]
            assert len(starts) == len(turns), (it["id"], starts)
            j = ids.index(self.video_id)
            f = self.facts[it["id"]]
            for (q, a), start in zip(turns, starts):
                is_count = object_targets.is_count_question(q)
                if is_count and self.count_target == "none":
                    continue
                keys = object_targets.named_object_tokens(q, f)
                if is_count and self.count_target == "last":
                    keys = object_targets.last_appearance(keys, f, self.tpf)
                if not keys.any():
                    continue
                m = torch.zeros(L, dtype=torch.bool)
                m[j:j + len(f)] = torch.from_numpy(keys)
                rows.append(b)
                positions.append(start - 1)
                masks.append(m)
                named.append(object_targets.named_words(q))
                counts.append(int(a) if is_count else -1)
        if not rows:
            return None
        named = torch.tensor(named, dtype=torch.long)
        return (torch.tensor(rows), torch.tensor(positions), torch.stack(masks), named[:, 0],
                named[:, 1], torch.tensor(counts, dtype=torch.long))


def sample_turns(rng, it):
    main = (it["question"], it["answer"])
    fups = [(f["question"], f["answer"]) for f in it["followups"] if f["question"] != it["question"]]
    k = rng.choices([0, 1, 2, 3], weights=[0.2, 0.2, 0.3, 0.3])[0]
    k = min(k, len(fups))
    extra = rng.sample(fups, k)
    if extra and rng.random() < 0.3:
        return extra[:1] + [main] + extra[1:]
    return [main] + extra


def make_batches(rng, items, frames_per_batch, ascending=False):
    """Batches of equal frame count; shuffled, or (curriculum, first epoch) short videos first."""
    by_f = {}
    for it in items:
        by_f.setdefault(it["num_frames"], []).append(it)
    batches = []
    for F, its in by_f.items():
        its = its[:]
        rng.shuffle(its)
        bs = max(1, frames_per_batch // F)
        for i in range(0, len(its), bs):
            batches.append(its[i:i + bs])
    rng.shuffle(batches)
    if ascending:
        batches.sort(key=lambda b: b[0]["num_frames"])  # stable: shuffled within a length
    return batches


def evaluate(model, data, items, frames_per_batch, dtype=None):
    """Greedy correctness by teacher forcing: an item is correct iff the argmax at every answer
    position (answer tokens + <|im_end|>) equals the target, i.e. greedy decoding reproduces
    exactly `answer<|im_end|>`."""
    import torch
    model.eval()
    per_task = {}
    with torch.no_grad():
        for batch in make_batches(random.Random(0), items, frames_per_batch):
            b = data.collate([(it, [(it["question"], it["answer"])]) for it in batch])
            if dtype is not None:
                b["pixel_values_videos"] = b["pixel_values_videos"].to(dtype)
            labels = b.pop("labels")
            logits = model(**b).logits.float()
            pred = logits[:, :-1].argmax(-1)
            tgt = labels[:, 1:]
            ok = ((pred == tgt) | (tgt == -100)).all(-1)
            for it, o in zip(batch, ok.tolist()):
                c = per_task.setdefault(it["task"], [0, 0])
                c[0] += int(o)
                c[1] += 1
    model.train()
    acc = {t: c[0] / c[1] for t, c in sorted(per_task.items())}
    n = sum(c[1] for c in per_task.values())
    overall = sum(c[0] for c in per_task.values()) / max(1, n)
    return overall, acc, n


def export(model, processor, out_dir, extra_files=()):
    from export import export_model  # noqa: PLC0415
    export_model(model, processor, out_dir, extra_files)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", required=True)
    ap.add_argument("--out", required=True, help="run folder: log, checkpoint")
    ap.add_argument("--export", required=True, help="model folder written at each validation")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-steps", type=int, default=4000)
    ap.add_argument("--time-budget-min", type=float, default=70.0)
    ap.add_argument("--frames-per-batch", type=int, default=192)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--weight-decay", type=float, default=0.05)
    ap.add_argument("--eval-every-min", type=float, default=6.0)
    ap.add_argument("--val-items", type=int, default=300)
    # One thread: on a shared 2-core machine, two OpenMP threads spin against other jobs and cost
    # 5-10x more CPU time per step than one.
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--init", default=None, help="state_dict to start from (stage 1 output)")
    ap.add_argument("--vision-lr-scale", type=float, default=1.0,
                    help="with --freeze-vision 0: the tower's learning rate relative to --lr")
    ap.add_argument("--freeze-vision", type=int, default=1,
                    help="keep the stage-1 vision tower fixed (as LLaVA does); projector and "
                         "decoder train")
    ap.add_argument("--prepend-log", default=None,
                    help="JSONL (stage 1 log) copied to the head of training_log.jsonl")
    ap.add_argument("--curriculum", type=int, default=1,
                    help="first epoch in order of increasing frame count")
    ap.add_argument("--facts-weight", type=float, default=0.0,
                    help="weight of the auxiliary object-facts loss at the video tokens "
                         "(object_targets.py); 0 = answers only")
    ap.add_argument("--facts-layers", default="2",
                    help="decoder layers (outputs, 1-based) whose video tokens are probed")
    ap.add_argument("--count-2plus-weight", type=float, default=1.0,
                    help="weight of the count probe's loss at tokens of an object's second or "
                         "later appearance, relative to the others")
    ap.add_argument("--retrieval-weight", type=float, default=0.0,
                    help="weight of the loss that makes one attention head at the answer position "
                         "look at the object the question names (needs --facts-weight > 0)")
    ap.add_argument("--retrieval-layer", type=int, default=4,
                    help="decoder layer (1-based) of the supervised retrieval head")
    ap.add_argument("--retrieval-head", type=int, default=0)
    ap.add_argument("--retrieval-count-last", type=int, default=0,
                    help="1: for count questions the retrieval head is trained on the object's "
                         "last appearance only, where its running count is the answer")
    ap.add_argument("--retrieval-skip-count", type=int, default=0,
                    help="1: count questions get no retrieval target; the head is left to find "
                         "what counting needs from the answer loss alone")
    ap.add_argument("--answer-count-probe-weight", type=float, default=0.0,
                    help="weight of a linear probe that reads a count question's answer from the "
                         "retrieval head's output (its slice of o_proj's input) at the answer "
                         "position (needs --retrieval-weight > 0)")
    ap.add_argument("--word-probe-weight", type=float, default=0.0,
                    help="weight of the word probes at the retrieval layer's input: the video "
                         "tokens' colour and shape, and the answer position's named colour and "
                         "shape, read through the embeddings of those words (needs "
                         "--retrieval-weight > 0)")
    args = ap.parse_args()
    # The retrieval targets come with the object facts, the word probes with the retrieval head.
    if args.retrieval_weight > 0 and args.facts_weight <= 0:
        ap.error("--retrieval-weight needs --facts-weight > 0")
    if args.word_probe_weight > 0 and args.retrieval_weight <= 0:
        ap.error("--word-probe-weight needs --retrieval-weight > 0")
    if args.retrieval_count_last and args.retrieval_skip_count:
        ap.error("--retrieval-count-last and --retrieval-skip-count exclude each other")
    if args.answer_count_probe_weight > 0 and (args.retrieval_weight <= 0
                                               or args.retrieval_skip_count):
        ap.error("--answer-count-probe-weight needs --retrieval-weight > 0 and count questions "
                 "in the retrieval targets")

    import torch
    import transformers
    from transformers import LlavaOnevisionForConditionalGeneration

    torch.set_num_threads(args.threads)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    os.makedirs(args.out, exist_ok=True)

    tok = fzmodel.wrap_tokenizer(fzmodel.build_tokenizer(fzmodel.ARCH["bpe_vocab"]))
    processor = fzmodel.build_processor(tok)
    cfg = fzmodel.build_config(tok)
    tpf = fzmodel.video_tokens_per_frame()
    train = Data(args.cache, "train", tok, tpf, object_facts=args.facts_weight > 0)
    val = Data(args.cache, "val", tok, tpf)
    train.count_target = ("last" if args.retrieval_count_last else
                          "none" if args.retrieval_skip_count else "object")

    # The hand-rendered prompt must equal the chat template, and the <video> expansion the
    # processor's.
    for it in val.items[:12]:
        turns = sample_turns(random.Random(1), it)
        ids, _, text = val.render(turns)
        ref = processor.apply_chat_template(template_conversation(turns), tokenize=False)
        assert ref == text, (ref, text)
        assert tok(ref, add_special_tokens=False)["input_ids"] == ids
        fr = np.zeros((it["num_frames"], 64, 64, 3), np.uint8)
        pi = processor(text=ref, videos=[fr], return_tensors="pt")["input_ids"][0].tolist()
        assert pi == val.expand(ids, [0] * len(ids), it["num_frames"])[0]

    cfg._attn_implementation = "eager"
    model = LlavaOnevisionForConditionalGeneration(cfg)
    if args.init:
        model.load_state_dict(torch.load(args.init, weights_only=True))
    model.train()
    nparams = sum(p.numel() for p in model.parameters())
    if args.freeze_vision:
        for p in model.model.vision_tower.parameters():
            p.requires_grad_(False)
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    # Linear probes reading object facts from the residual stream; discarded at export.
    facts_layers = [int(x) for x in args.facts_layers.split(",")] if args.facts_weight > 0 else []
    H = cfg.text_config.hidden_size
    probes = torch.nn.ModuleDict({
        str(layer): torch.nn.Sequential(torch.nn.LayerNorm(H),
                                        torch.nn.Linear(H, object_targets.PROBE_WIDTH))
        for layer in facts_layers})
    trainable += [(f"probe.{n}", p) for n, p in probes.named_parameters()]
    # The supervised retrieval head's attention probabilities, taken from its layer's eager
    # attention (which returns them anyway) rather than by output_attentions=True, which returns
    # every layer's, the vision tower's included.
    retrieval_attn = {}
    if args.retrieval_weight > 0:
        attn_module = model.model.language_model.layers[args.retrieval_layer - 1].self_attn
        attn_module.register_forward_hook(
            lambda _module, _inputs, output: retrieval_attn.__setitem__("weights", output[1]))
    # The answer-count probe reads the retrieval head's output: its head_dim slice of the
    # concatenated heads that o_proj mixes.
    head_dim = H // cfg.text_config.num_attention_heads
    count_probe = torch.nn.Linear(head_dim, object_targets.COUNT_CLASSES)
    if args.answer_count_probe_weight > 0:
        attn_module.o_proj.register_forward_pre_hook(
            lambda _module, inputs: retrieval_attn.__setitem__("heads", inputs[0]))
        trainable += [(f"probe.count.{n}", p) for n, p in count_probe.named_parameters()]
    # Word probes: the colour and shape words as the questions tokenise them (" red", " circle").
    word_ids = {kind: [tok(" " + w, add_special_tokens=False)["input_ids"] for w in words]
                for kind, words in (("color", object_targets.COLORS),
                                    ("shape", object_targets.SHAPES))}
    assert all(len(i) == 1 for ids in word_ids.values() for i in ids), word_ids
    word_scale = torch.nn.Parameter(torch.tensor(10.0))
    if args.word_probe_weight > 0:
        trainable.append(("probe.word_scale", word_scale))

    def is_decayed(n, p):
        return p.ndim >= 2 and "embed" not in n

    def is_vision(n):
        return ".vision_tower." in f".{n}"

    # A trainable tower (--freeze-vision 0) may get its own, smaller learning rate: at the
    # decoder's 2e-3 it unlearns its stage-1 features (see README.md).
    split = not args.freeze_vision and args.vision_lr_scale != 1.0
    groups = []
    for vision in ([False, True] if split else [None]):
        for decayed in (True, False):
            params = [p for n, p in trainable if is_decayed(n, p) == decayed and
                      (vision is None or is_vision(n) == vision)]
            groups.append({"params": params,
                           "weight_decay": args.weight_decay if decayed else 0.0,
                           "lr_scale": args.vision_lr_scale if vision else 1.0})
    opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.98), eps=1e-8)

    ckpt_path = os.path.join(args.out, "ckpt.pt")
    log_path = os.path.join(args.out, "training_log.jsonl")
    state = {"step": 0, "epoch": 0, "elapsed": 0.0, "samples": 0, "best": -1.0}
    if args.resume and os.path.exists(ckpt_path):
        ck = torch.load(ckpt_path, weights_only=False)
        model.load_state_dict(ck["model"])
        if "probes" in ck:
            probes.load_state_dict(ck["probes"])
        if "count_probe" in ck:
            count_probe.load_state_dict(ck["count_probe"])
        if "word_scale" in ck:
            word_scale.data.copy_(ck["word_scale"])
        opt.load_state_dict(ck["opt"])
        state = ck["state"]
    fh = open(log_path, "a" if args.resume else "w")
    if args.prepend_log and not args.resume:
        with open(args.prepend_log) as f:
            fh.write(f.read())
    if not args.resume:
        log(fh, {"type": "config", "args": vars(args), "arch": fzmodel.ARCH, "params": nparams,
                 "train_items": len(train.items), "val_items": len(val.items),
                 "torch": torch.__version__, "transformers": transformers.__version__,
                 "video_tokens_per_frame": tpf})

    # Validation subset balanced over tasks.
    by_task = {}
    for it in val.items:
        by_task.setdefault(it["task"], []).append(it)
    per = max(1, args.val_items // max(1, len(by_task)))
    val_sub = [it for t in sorted(by_task) for it in by_task[t][:per]]

    budget = args.time_budget_min * 60
    t_start = time.time() - state["elapsed"]
    last_eval = time.time()
    rng = random.Random(args.seed * 1000 + state["epoch"])
    batches = make_batches(rng, train.items, args.frames_per_batch,
                           ascending=args.curriculum and state["epoch"] == 0)
    bi = state.get("batch_index", 0)
    loss_acc, n_acc = 0.0, 0
    facts_acc = {}

    def progress():
        return max(state["step"] / args.max_steps, (time.time() - t_start) / budget)

    def save_and_eval(final=False):
        state["elapsed"] = time.time() - t_start
        overall, acc, n = evaluate(model, val, val.items if final else val_sub,
                                   args.frames_per_batch * 2)
        log(fh, {"type": "val", "step": state["step"], "epoch": state["epoch"],
                 "samples": state["samples"], "elapsed_s": round(state["elapsed"], 1),
                 "n": n, "acc": round(overall, 4), "per_task": {k: round(v, 4) for k, v in acc.items()},
                 "final": final})
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(),
                    "probes": probes.state_dict(), "word_scale": word_scale.detach(),
                    "count_probe": count_probe.state_dict(),
                    "state": dict(state, batch_index=bi)}, ckpt_path + ".tmp")
        os.replace(ckpt_path + ".tmp", ckpt_path)
        export(model, processor, args.export, extra_files=[log_path])
        return overall

    while progress() < 1.0:
        if bi >= len(batches):
            state["epoch"] += 1
            rng = random.Random(args.seed * 1000 + state["epoch"])
            batches = make_batches(rng, train.items, args.frames_per_batch)
            bi = 0
        batch = batches[bi]
        bi += 1
        srng = random.Random(hash((args.seed, state["step"])) & 0xFFFFFFFF)
        b = train.collate([(it, sample_turns(srng, it)) for it in batch])
        p = progress()
        warm = min(1.0, (state["step"] + 1) / args.warmup)
        lr = args.lr * warm * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(p, 1.0))))
        for g in opt.param_groups:
            g["lr"] = lr * g.get("lr_scale", 1.0)
        facts = b.pop("object_facts", None)
        retrieval = b.pop("retrieval", None)
        out = model(**b, output_hidden_states=facts is not None)
        loss = out.loss
        if args.retrieval_weight > 0 and retrieval is not None:
            rows, positions, key_mask, named_color, named_shape, counts = retrieval
            attn = retrieval_attn["weights"][rows, args.retrieval_head, positions]
            aux, mass = object_targets.retrieval_loss(attn, key_mask)
            loss = loss + args.retrieval_weight * aux
            facts_acc.setdefault("retrieval_mass", []).append(mass)
            asked = counts >= 0
            if args.answer_count_probe_weight > 0 and asked.any():
                h0 = args.retrieval_head * head_dim
                heads = retrieval_attn["heads"][rows[asked], positions[asked], h0:h0 + head_dim]
                aux, acc = object_targets.answer_count_loss(count_probe(heads), counts[asked])
                loss = loss + args.answer_count_probe_weight * aux
                facts_acc.setdefault("answer_count_acc", []).append(acc)
            if args.word_probe_weight > 0:
                # The retrieval layer's input: the keys of the video tokens and the query of the
                # answer position are projections of it.
                h = out.hidden_states[args.retrieval_layer - 1]
                emb = model.get_input_embeddings().weight.detach()
                color_emb = emb[[i[0] for i in word_ids["color"]]]
                shape_emb = emb[[i[0] for i in word_ids["shape"]]]
                sel = facts[..., object_targets.MASK] > 0
                key_loss, key_acc = object_targets.word_probe_loss(
                    h[sel], facts[sel][:, object_targets.COLOR].long(),
                    facts[sel][:, object_targets.SHAPE].long(), color_emb, shape_emb, word_scale)
                query_loss, query_acc = object_targets.word_probe_loss(
                    h[rows, positions], named_color, named_shape, color_emb, shape_emb,
                    word_scale)
                loss = loss + args.word_probe_weight * (key_loss + query_loss)
                facts_acc.setdefault("word_key_acc", []).append(key_acc)
                facts_acc.setdefault("word_query_acc", []).append(query_acc)
        if facts is not None:
            sel = facts[..., object_targets.MASK] > 0
            for layer, probe in probes.items():
                h = out.hidden_states[int(layer)][sel]
                aux, metrics = object_targets.probe_loss(probe(h), facts[sel],
                                                          args.count_2plus_weight)
                loss = loss + args.facts_weight * aux / len(probes)
                for k, v in metrics.items():
                    facts_acc.setdefault(f"L{layer}_{k}", []).append(v)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_([p for _, p in trainable], 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        state["step"] += 1
        state["samples"] += len(batch)
        loss_acc += out.loss.item()
        n_acc += 1
        if state["step"] % 20 == 0:
            log(fh, {"type": "train", "step": state["step"], "epoch": state["epoch"],
                     "samples": state["samples"], "loss": round(loss_acc / n_acc, 5),
                     "lr": round(lr, 7), "grad_norm": round(float(gn), 4),
                     "elapsed_s": round(time.time() - t_start, 1), "progress": round(p, 4)}
                | {k: round(float(np.mean(v)), 4) for k, v in facts_acc.items()})
            loss_acc, n_acc = 0.0, 0
            facts_acc = {}
        if time.time() - last_eval > args.eval_every_min * 60:
            save_and_eval()
            last_eval = time.time()
    state["ended_by"] = "steps" if state["step"] >= args.max_steps else "time"
    log(fh, {"type": "end", "step": state["step"], "ended_by": state["ended_by"]})
    save_and_eval(final=True)


if __name__ == "__main__":
    main()
