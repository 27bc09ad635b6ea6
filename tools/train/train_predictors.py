#!/usr/bin/env python3
"""Trains the Dynamic-LLaVA predictors (docs/methods.md §3) for a framezip-tiny-video model folder, with
the model frozen, and saves them beside it as predictors.safetensors + predictors_config.json.

  train_predictors.py --model models/framezip-tiny-video --cache .data/cache [--out DIR]
      [--time-budget-min 12] [--vision-keep-rate 0.2] [--text-keep-rate 0.5] [--val-items 600]
  train_predictors.py --model M --cache2 .data/features2 [--features1 .data/features1] ...
      (synthvid v2 from prepare_features.py's caches: long videos, sessions, descriptions, so the
      output-text predictor learns to gate long answers; predictor_data.py)

- Image-token keep predictor on the hidden states entering decoder layer `sparse_layer` (2), and an
  output-text keep predictor (per token), both sized to the model's hidden width.
- Training (§3.6): Gumbel-softmax hard decisions with a straight-through estimator; from layer
  `sparse_layer` on every attention is a masked softmax exp(x_ij)·G_ij / Σ_k exp(x_ik)·G_ik, where
  G_ij is the keep decision of key j (image tokens and output-text tokens; 1 for prompt text) and
  G_ii = 1. Loss = answer-token cross-entropy + λ_v (r_v − mean image keep)² + λ_t (r_t − mean
  output-text keep)². Gumbel τ decays exponentially 1.0 → 0.1 over the run.
- Evaluation (§3.3): teacher-forced exact-answer accuracy (as train.py's evaluate()) of the frozen
  model with full attention, and with the image tokens pruned inference-style: top-k
  (k = int(N_img·rate)) of log_softmax(logits)[..., 0] at layer `sparse_layer`, the other image
  tokens physically removed from the sequence for layers >= sparse_layer, original RoPE positions
  kept. Also a random top-k baseline at the same k, and the text predictor's keep rate.

Runs niced (19), on one thread, within a time budget; logs JSONL records to predictors_log.jsonl.
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
from predictor_data import V1Source, V2Source  # noqa: E402  (the exact training formats)

ATTN_NAME = "dynllava_masked"


# ----------------------------------------------------------------------------- predictors

def build_predictors(hidden, width, heads, mlp_ratio, blocks):
    import torch
    from torch import nn

    class VitBlock(nn.Module):
        """Pre-LN transformer block over the image tokens of one sample (key padding by `valid`)."""

        def __init__(self):
            super().__init__()
            self.norm1 = nn.LayerNorm(width)
            self.qkv = nn.Linear(width, 3 * width)
            self.proj = nn.Linear(width, width)
            self.norm2 = nn.LayerNorm(width)
            self.fc1 = nn.Linear(width, width * mlp_ratio)
            self.fc2 = nn.Linear(width * mlp_ratio, width)

        def forward(self, x, valid):
            B, N, _ = x.shape
            q, k, v = self.qkv(self.norm1(x)).view(B, N, 3, heads, width // heads).permute(2, 0, 3, 1, 4)
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=valid[:, None, None, :])
            x = x + self.proj(a.transpose(1, 2).reshape(B, N, width))
            return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.norm2(x))))

    class ImagePredictor(nn.Module):
        """§3.2: LN → Linear(C→W) → GELU → ViT blocks → [local W/2 | masked-mean global W/2]
        → MLP W→W/2→W/4→2. Logit 0 = keep."""

        def __init__(self):
            super().__init__()
            self.in_norm = nn.LayerNorm(hidden)
            self.in_proj = nn.Linear(hidden, width)
            self.blocks = nn.ModuleList([VitBlock() for _ in range(blocks)])
            self.fc1 = nn.Linear(width, width // 2)
            self.fc2 = nn.Linear(width // 2, width // 4)
            self.fc3 = nn.Linear(width // 4, 2)

        def forward(self, h, valid):
            x = torch.nn.functional.gelu(self.in_proj(self.in_norm(h)))
            for blk in self.blocks:
                x = blk(x, valid)
            half = width // 2
            w = valid.to(x.dtype)[..., None]
            glob = (x[..., half:] * w).sum(1, keepdim=True) / w.sum(1, keepdim=True).clamp_min(1.0)
            x = torch.cat([x[..., :half], glob.expand(-1, x.shape[1], -1)], -1)
            x = torch.nn.functional.gelu(self.fc1(x))
            x = torch.nn.functional.gelu(self.fc2(x))
            return self.fc3(x)

    class TextPredictor(nn.Module):
        """§3.2: LN → Linear(C→W) → GELU → W→W/2 → GELU → W/2→W/4 → GELU → W/4→2; per token."""

        def __init__(self):
            super().__init__()
            self.in_norm = nn.LayerNorm(hidden)
            self.in_proj = nn.Linear(hidden, width)
            self.fc1 = nn.Linear(width, width // 2)
            self.fc2 = nn.Linear(width // 2, width // 4)
            self.fc3 = nn.Linear(width // 4, 2)

        def forward(self, h):
            x = torch.nn.functional.gelu(self.in_proj(self.in_norm(h)))
            x = torch.nn.functional.gelu(self.fc1(x))
            x = torch.nn.functional.gelu(self.fc2(x))
            return self.fc3(x)

    class Predictors(nn.Module):
        def __init__(self):
            super().__init__()
            self.image_predictor = ImagePredictor()
            self.text_predictor = TextPredictor()

    return Predictors()


def load_predictors(folder):
    """Rebuilds the trained predictors from predictors.safetensors + predictors_config.json (for
    reference runs and golden tests of other implementations)."""
    import safetensors.torch
    with open(os.path.join(folder, "predictors_config.json")) as f:
        cfg = json.load(f)
    a = cfg["training"]["args"]
    preds = build_predictors(cfg["hidden_size"], a["width"], a["heads"], a["mlp_ratio"], a["blocks"])
    preds.load_state_dict(safetensors.torch.load_file(os.path.join(folder, "predictors.safetensors")))
    return preds.eval(), cfg


def init_keep_bias(fc3, rate):
    """Start the keep probability at the budget, so early steps are not spent on the budget loss."""
    import torch
    with torch.no_grad():
        fc3.bias.zero_()
        fc3.bias[0] = math.log(rate / (1 - rate))


# ----------------------------------------------------------------------------- sparse attention

class SparseState:
    """What the layer-`sparse_layer` hook decided, read by the attention function of later layers.

    mode: None (full attention), "mask" (masked softmax with key gates `gate` [B, L]: training
    and the masked-evaluation variants) or "prune" (physical removal of image tokens, §3.3)."""

    def __init__(self, sparse_layer):
        self.sparse_layer = sparse_layer
        self.mode = None
        self.img_mask = None      # [B, L] bool: image (video) token positions
        self.out_mask = None      # [B, L] bool: output-text (answer) positions
        self.decide = None        # callable(hidden [B, L, C]) -> gate [B, L] or kept index [B, L']
        self.gate = None
        self.keep_idx = None
        self.pruned_mask = None
        self.pruned_pe = None
        self.text_threshold = 0.0    # output text is kept when logit 0 − logit 1 exceeds it
        self.random_text_rate = 0.5  # random_text's keep rate (pruned_text's measured one)


def install(model, state):
    """Registers the masked-softmax attention for the text decoder and the layer hooks."""
    import torch
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, eager_mask
    from transformers.models.qwen2.modeling_qwen2 import eager_attention_forward, repeat_kv

    def masked_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kw):
        if state.mode != "mask" or module.layer_idx < state.sparse_layer:
            return eager_attention_forward(module, query, key, value, attention_mask, scaling, dropout, **kw)
        k = repeat_kv(key, module.num_key_value_groups)
        v = repeat_kv(value, module.num_key_value_groups)
        x = torch.matmul(query, k.transpose(2, 3)).float() * scaling
        if attention_mask is not None:
            x = x + attention_mask
        L = x.shape[-1]
        eye = torch.eye(L, dtype=x.dtype, device=x.device)
        # G_ij = gate_j off the diagonal, 1 on it: a dropped token still sees itself (§3.4 step 2).
        # The gates are exactly 0/1 in value (hard decisions; the straight-through part only
        # carries gradient).
        G = state.gate[:, None, None, :].to(x.dtype) * (1 - eye) + eye
        # Subtract the max over the *kept* keys, so the denominator is >= 1, and clamp at 0, which
        # changes nothing in the forward pass (kept keys are <= 0 already, dropped ones are
        # multiplied by 0) but bounds the straight-through gradient into a dropped key's gate:
        # unclamped it is exp(x_dropped − max_kept), which reached 1e7 when a dropped key would
        # have dominated the row, and swamped every other gradient.
        x = x - x.masked_fill(G.detach() < 0.5, float("-inf")).amax(-1, keepdim=True).detach()
        e = torch.exp(x.clamp(max=0.0)) * G
        w = (e / e.sum(-1, keepdim=True)).to(query.dtype)
        return torch.matmul(w, v).transpose(1, 2).contiguous(), w

    AttentionInterface.register(ATTN_NAME, masked_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(ATTN_NAME, eager_mask)  # additive float mask, as eager
    model.config.text_config._attn_implementation = ATTN_NAME
    lm = model.model.language_model
    assert lm.layers[0].self_attn.config._attn_implementation == ATTN_NAME

    def hook_sparse(module, args, kwargs):
        hidden = args[0] if args else kwargs["hidden_states"]
        if state.mode == "mask":
            state.gate = state.decide(hidden)
        elif state.mode == "prune":
            idx = state.decide(hidden)  # [B, L'] kept positions, ascending
            state.keep_idx = idx
            hidden = hidden.gather(1, idx[..., None].expand(-1, -1, hidden.shape[-1]))
            m = kwargs["attention_mask"]
            m = m.gather(2, idx[:, None, :, None].expand(-1, m.shape[1], -1, m.shape[3]))
            state.pruned_mask = m.gather(3, idx[:, None, None, :].expand(-1, m.shape[1], m.shape[2], -1))
            cos, sin = kwargs["position_embeddings"]
            g = idx[..., None].expand(-1, -1, cos.shape[-1])
            # Original positions are kept for RoPE (§3.3 step 4).
            state.pruned_pe = (cos.expand(idx.shape[0], -1, -1).gather(1, g),
                               sin.expand(idx.shape[0], -1, -1).gather(1, g))
            kwargs = dict(kwargs, position_ids=kwargs["position_ids"].expand(idx.shape[0], -1).gather(1, idx))
            if args:
                args = (hidden,) + tuple(args[1:])
            else:
                kwargs["hidden_states"] = hidden
        if state.mode == "prune":
            kwargs = dict(kwargs, attention_mask=state.pruned_mask, position_embeddings=state.pruned_pe)
        return args, kwargs

    def hook_later(module, args, kwargs):
        if state.mode == "prune":
            kwargs = dict(kwargs, attention_mask=state.pruned_mask, position_embeddings=state.pruned_pe)
        return args, kwargs

    lm.layers[state.sparse_layer].register_forward_pre_hook(hook_sparse, with_kwargs=True)
    for layer in lm.layers[state.sparse_layer + 1:]:
        layer.register_forward_pre_hook(hook_later, with_kwargs=True)


def image_hidden(hidden, img_mask):
    B = hidden.shape[0]
    n = img_mask.sum(1)
    assert bool((n == n[0]).all()), "a batch must hold one frame count"
    return hidden[img_mask].view(B, int(n[0]), hidden.shape[-1])


def topk_keep_index(score, img_mask, k):
    """Kept positions [B, L - N_img + k], ascending: every non-image position + the top-k image
    tokens by score (sorted back into their original order, §3.3 step 3)."""
    import torch
    B, L = img_mask.shape
    img_pos = torch.nonzero(img_mask)[:, 1].view(B, -1)
    top = score.topk(k, dim=1).indices
    keep = ~img_mask.clone()
    keep.scatter_(1, img_pos.gather(1, top), True)
    return torch.nonzero(keep)[:, 1].view(B, -1)


# ----------------------------------------------------------------------------- evaluation

def balanced(items, n):
    by_task = {}
    for it in items:
        by_task.setdefault(it["task"], []).append(it)
    per = max(1, n // max(1, len(by_task)))
    return [it for t in sorted(by_task) for it in by_task[t][:per]]


def evaluate(model, preds, state, data, items, args, mode):
    """Teacher-forced exact-answer accuracy as train.py's evaluate(), under one attention mode:
    full | pruned (predictor top-k, physical removal) | random (random top-k, physical removal) |
    pruned_text (predictor top-k as a key mask + output-text keep = logit0 − logit1 > the text
    threshold, 0 unless calibrated) | random_text (the same image mask, output text kept at random
    at pruned_text's measured rate: the baseline its ranking must beat) |
    full_two_turn (v1: pruned_text's full-attention reference). v1 scores the item's answer, or
    with pruned_text/random_text/full_two_turn a follow-up after it, which attends over the gated
    first answer;
    v2 (V2Source) scores every turn (per task, and per answer token for descriptions)."""
    import torch
    per_task, keep_img, keep_txt = {}, [], []
    tokens = [0, 0]  # right and all answer tokens of describe turns
    gen = torch.Generator().manual_seed(args.seed + 7)
    two_turn = mode in ("pruned_text", "random_text", "full_two_turn")
    with torch.no_grad():
        for batch in data.batches(random.Random(0), items, scale=2):
            b = data.collate(data.eval_conversations(batch, two_turn))
            labels = b.pop("labels")
            turn_of = b.pop("turn_of", None)
            img_mask = b["input_ids"] == data.video_id
            out_mask = labels != -100
            n_img = int(img_mask.sum(1)[0])
            k = max(1, int(n_img * args.vision_keep_rate))

            def image_score(hidden):
                lg = preds.image_predictor(image_hidden(hidden, img_mask),
                                           torch.ones(img_mask.shape[0], n_img, dtype=torch.bool))
                return lg.log_softmax(-1)[..., 0]

            def decide_prune(hidden):
                if mode == "random":
                    score = torch.rand(img_mask.shape[0], n_img, generator=gen)
                else:
                    score = image_score(hidden)
                return topk_keep_index(score, img_mask, k)

            def decide_mask(hidden):
                score = image_score(hidden)
                sel = torch.zeros_like(score).scatter_(1, score.topk(k, dim=1).indices, 1.0)
                gate = torch.ones(img_mask.shape, dtype=hidden.dtype)
                gate[img_mask] = sel.flatten()
                if mode == "random_text":
                    rate = state.random_text_rate
                    tk = (torch.rand(hidden.shape[:2], generator=gen) < rate).to(hidden.dtype)
                elif two_turn:
                    tl = preds.text_predictor(hidden)
                    tk = (tl[..., 0] - tl[..., 1] > state.text_threshold).to(hidden.dtype)
                if two_turn:
                    keep_txt.append(tk[out_mask])
                    gate = torch.where(out_mask, tk, gate)
                return gate

            state.img_mask, state.out_mask = img_mask, out_mask
            if mode in ("full", "full_two_turn"):
                state.mode = None
            elif mode in ("pruned", "random"):
                state.mode, state.decide = "prune", decide_prune
            else:
                state.mode, state.decide = "mask", decide_mask
            logits = data.forward(model, b).logits.float()
            if state.mode == "prune":
                labels = labels.gather(1, state.keep_idx)
                if turn_of is not None:
                    turn_of = turn_of.gather(1, state.keep_idx)
                keep_img.append(k / n_img)
            elif state.mode == "mask":
                keep_img.append(k / n_img)
            state.mode = None
            pred = logits[:, :-1].argmax(-1)
            tgt = labels[:, 1:]
            if turn_of is not None:
                score_turns(batch, pred, tgt, turn_of[:, 1:], per_task, tokens)
                continue
            if two_turn:
                # Score the last turn only: its answer attends over the earlier, gated answer.
                last = torch.zeros_like(tgt, dtype=torch.bool)
                for r in range(tgt.shape[0]):
                    pos = torch.nonzero(tgt[r] != -100)[:, 0]
                    gaps = torch.nonzero(pos[1:] - pos[:-1] > 1)[:, 0]
                    start = pos[gaps[-1] + 1] if len(gaps) else pos[0]
                    last[r, start:] = True
                tgt = torch.where(last, tgt, torch.full_like(tgt, -100))
            ok = ((pred == tgt) | (tgt == -100)).all(-1)
            for it, o in zip(batch, ok.tolist()):
                c = per_task.setdefault(it["task"], [0, 0])
                c[0] += int(o)
                c[1] += 1
    n = sum(c[1] for c in per_task.values())
    res = {"mode": mode, "n": n, "acc": round(sum(c[0] for c in per_task.values()) / max(1, n), 4),
           "per_task": {t: round(c[0] / c[1], 4) for t, c in sorted(per_task.items())}}
    if keep_img:
        res["image_keep_rate"] = round(float(np.mean(keep_img)), 4)
    if keep_txt:
        res["text_keep_rate"] = round(float(torch.cat(keep_txt).mean()), 4)
    if tokens[1]:
        res["describe_token_acc"] = round(tokens[0] / tokens[1], 4)
    return res


def score_turns(batch, pred, tgt, turn_of, per_task, tokens):
    """Per-turn exact match (every labelled position of the turn right) into per_task, keyed by the
    item's task (v1 items: "v1_" + task); describe turns also count their right tokens."""
    for r, it in enumerate(batch):
        task = it["task"] if "turns" in it else "v1_" + it["task"]
        answer = tgt[r] != -100
        for t in sorted(set(turn_of[r][answer].tolist())):
            sel = answer & (turn_of[r] == t)
            right = pred[r][sel] == tgt[r][sel]
            c = per_task.setdefault(task, [0, 0])
            c[0] += int(bool(right.all()))
            c[1] += 1
            if task == "describe":
                tokens[0] += int(right.sum())
                tokens[1] += int(sel.sum())


def calibrate_text_threshold(model, preds, state, data, items, args):
    """The margin (logit 0 − logit 1) above which the output-text predictor keeps a token so that
    it keeps --text-keep-rate of the answer tokens of items with at least
    --text-min-output-tokens of them (the budget's samples). Hard Gumbel training meets the budget
    in expectation: a predictor near p = 0.5 on every token samples half of them, but its argmax
    keeps all or none (README.md, "Dynamic-LLaVA predictors"). The margins are those entering
    sparse_layer, which gating cannot change (earlier layers see every token)."""
    import torch
    captured = {}
    hook = model.model.language_model.layers[args.sparse_layer].register_forward_pre_hook(
        lambda mod, a, kw: captured.__setitem__("h", a[0] if a else kw["hidden_states"]),
        with_kwargs=True)
    margins = []
    with torch.no_grad():
        for batch in data.batches(random.Random(0), items, scale=2):
            b = data.collate(data.eval_conversations(batch, True))
            labels = b.pop("labels")
            b.pop("turn_of", None)
            data.forward(model, b)
            out_mask = labels != -100
            sel = out_mask.sum(1) >= args.text_min_output_tokens
            tl = preds.text_predictor(captured["h"])
            m = tl[..., 0] - tl[..., 1]
            margins.append(m[out_mask & sel[:, None]])
    hook.remove()
    m = torch.cat(margins)
    if m.numel() == 0:
        sys.exit(f"--calibrate-text-threshold: no validation item has an answer of at least "
                 f"--text-min-output-tokens {args.text_min_output_tokens} tokens to calibrate on")
    threshold = float(torch.quantile(m.double(), 1.0 - args.text_keep_rate))
    return threshold, {"tokens": int(m.numel()), "margin_min": round(float(m.min()), 6),
                       "margin_median": round(float(m.median()), 6),
                       "margin_max": round(float(m.max()), 6)}


def check_prune_equivalence(model, preds, state, data, items, args):
    """Physical removal and a hard key mask must give the same answer logits (the masked path is
    what training uses). Returns the max |Δlogit| at answer positions on one batch."""
    import torch
    its = [it for it in items if it["num_frames"] == items[0]["num_frames"]][:4]
    b = data.collate(data.eval_conversations(its, False))
    labels = b.pop("labels")
    b.pop("turn_of", None)
    img_mask = b["input_ids"] == data.video_id
    n_img = int(img_mask.sum(1)[0])
    k = max(1, int(n_img * args.vision_keep_rate))
    cache = {}

    def score(hidden):
        if "s" not in cache:
            cache["s"] = preds.image_predictor(image_hidden(hidden, img_mask),
                                               torch.ones(len(its), n_img, dtype=torch.bool)).log_softmax(-1)[..., 0]
        return cache["s"]

    def decide_mask(hidden):
        s = score(hidden)
        gate = torch.ones(img_mask.shape, dtype=hidden.dtype)
        gate[img_mask] = torch.zeros_like(s).scatter_(1, s.topk(k, dim=1).indices, 1.0).flatten()
        return gate

    with torch.no_grad():
        state.mode, state.decide = "prune", lambda h: topk_keep_index(score(h), img_mask, k)
        lp = data.forward(model, b).logits.float()
        idx = state.keep_idx
        state.mode, state.decide = "mask", decide_mask
        lm = data.forward(model, b).logits.float().gather(1, idx[..., None].expand(-1, -1, lp.shape[-1]))
        state.mode = None
    ans = (labels.gather(1, idx) != -100)[:, 1:]
    return float((lp[:, :-1] - lm[:, :-1]).abs()[ans].max())


# ----------------------------------------------------------------------------- main

def initialized_from(folder):
    """The training record of the predictors a run started from (--init-predictors), or None."""
    if not folder:
        return None
    with open(os.path.join(folder, "predictors_config.json")) as f:
        return dict(json.load(f)["training"], folder=os.path.abspath(folder))


def log(fh, rec):
    rec = dict(rec, time=round(time.time(), 1))
    fh.write(json.dumps(rec) + "\n")
    fh.flush()
    print(json.dumps(rec), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="framezip-tiny-video folder (read only)")
    ap.add_argument("--cache", default=".data/cache", help="prepare_data.py cache (train/val .u8 + .json)")
    ap.add_argument("--cache2", default=None,
                    help="prepare_features.py cache of synthvid v2: train on it instead of --cache")
    ap.add_argument("--cache2-extra", action="append", default=[], metavar="CACHE",
                    help="another v2 feature cache's train split (with --cache2)")
    ap.add_argument("--features1", default=None,
                    help="prepare_features.py cache of synthvid v1, mixed in (with --cache2)")
    ap.add_argument("--tokens-per-batch", type=int, default=2100,
                    help="video tokens per batch with --cache2 (train_v2.py's batching)")
    ap.add_argument("--out", default=None, help="where predictors.* go (default: the model folder)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--time-budget-min", type=float, default=12.0, help="training time (evaluation excluded)")
    ap.add_argument("--max-steps", type=int, default=100000)
    ap.add_argument("--frames-per-batch", type=int, default=192)
    ap.add_argument("--sparse-layer", type=int, default=2)
    ap.add_argument("--vision-keep-rate", type=float, default=0.2)
    ap.add_argument("--text-keep-rate", type=float, default=0.5)
    ap.add_argument("--lambda-vision", type=float, default=10.0,
                    help="budget-loss weight (paper 100 against a 7B's LM loss; see README)")
    ap.add_argument("--lambda-text", type=float, default=10.0)
    ap.add_argument("--text-min-output-tokens", type=int, default=1,
                    help="text budget loss only on samples with at least this many output tokens "
                         "(paper: 50; our answers are 1-3 tokens + <|im_end|>)")
    ap.add_argument("--tau-start", type=float, default=1.0)
    ap.add_argument("--tau-end", type=float, default=0.1)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--width", type=int, default=32,
                    help="predictor width (paper 512 for C=4096; 32 here: a predictor as wide as "
                         "the 128-wide model costs as much as the two layers pruning saves)")
    ap.add_argument("--heads", type=int, default=1)
    ap.add_argument("--mlp-ratio", type=int, default=4)
    ap.add_argument("--blocks", type=int, default=1,
                    help="pre-LN ViT blocks (paper 2; 1 here: at 64 frames the second block's "
                         "attention cost the prefill target, for 0.6 points; bench/RESULTS.md)")
    ap.add_argument("--init-predictors", default=None, metavar="DIR",
                    help="start from DIR's predictors.safetensors (with --time-budget-min 0: no "
                         "training, only calibration and evaluation)")
    ap.add_argument("--calibrate-text-threshold", action="store_true",
                    help="keep output text above the margin that keeps --text-keep-rate of the "
                         "long answers' tokens (calibrate_text_threshold), instead of argmax; "
                         "written to predictors_config.json as output_text_threshold")
    ap.add_argument("--val-items", type=int, default=600, help="balanced over tasks; 0 = all")
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    out = args.out or args.model

    os.nice(max(0, 19 - os.nice(0)))
    import safetensors.torch
    import torch
    import transformers
    from transformers import AutoTokenizer, LlavaOnevisionForConditionalGeneration

    torch.set_num_threads(args.threads)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    os.makedirs(out, exist_ok=True)
    fh = open(os.path.join(out, "predictors_log.jsonl"), "w")
    t0 = time.time()

    model = LlavaOnevisionForConditionalGeneration.from_pretrained(
        args.model, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    tok = AutoTokenizer.from_pretrained(args.model)
    vc, tc = model.config.vision_config, model.config.text_config
    g = vc.image_size // vc.patch_size
    tpf = ((g + 1) // 2) ** 2
    if args.cache2:
        caches = [(args.cache2, "v2")] + [(d, "v2") for d in args.cache2_extra]
        if args.features1:
            caches.append((args.features1, "v1"))
        train = V2Source(caches, "train", tok, args.tokens_per_batch)
        val = V2Source([c for c in caches if c[0] not in args.cache2_extra], "val", tok,
                       args.tokens_per_batch)
    else:
        train = V1Source(args.cache, "train", tok, tpf, vc.image_size, args.frames_per_batch)
        val = V1Source(args.cache, "val", tok, tpf, vc.image_size, args.frames_per_batch)
    assert args.sparse_layer < tc.num_hidden_layers

    state = SparseState(args.sparse_layer)
    install(model, state)
    preds = build_predictors(tc.hidden_size, args.width, args.heads, args.mlp_ratio, args.blocks)
    init_keep_bias(preds.image_predictor.fc3, args.vision_keep_rate)
    init_keep_bias(preds.text_predictor.fc3, args.text_keep_rate)
    if args.init_predictors:
        preds.load_state_dict(safetensors.torch.load_file(
            os.path.join(args.init_predictors, "predictors.safetensors")))
    n_pred = sum(p.numel() for p in preds.parameters())
    opt = torch.optim.AdamW(preds.parameters(), lr=args.lr, betas=(0.9, 0.98), weight_decay=0.01)
    log(fh, {"type": "config", "args": vars(args), "predictor_params": n_pred,
             "model_params": sum(p.numel() for p in model.parameters()),
             "text_hidden": tc.hidden_size, "layers": tc.num_hidden_layers, "tokens_per_frame": tpf,
             "torch": torch.__version__, "transformers": transformers.__version__})

    # ---------------- training
    budget = args.time_budget_min * 60
    t_train = time.time()
    step, samples, epoch = 0, 0, 0
    rng = random.Random(args.seed * 1000 + 17)
    batches = train.batches(rng, train.items)
    bi = 0
    acc = {"lm": 0.0, "bv": 0.0, "bt": 0.0, "kv": 0.0, "kt": 0.0, "n": 0}

    def progress():
        if budget <= 0:
            return 1.0
        return max(step / args.max_steps, (time.time() - t_train) / budget)

    stats = {}
    recent = []  # sampled (image, text) keep rates of the last 100 steps
    while progress() < 1.0:
        if bi >= len(batches):
            epoch += 1
            batches = train.batches(random.Random(args.seed * 1000 + 17 + epoch), train.items)
            bi = 0
        batch = batches[bi]
        bi += 1
        srng = random.Random(hash((args.seed, step)) & 0xFFFFFFFF)
        b = train.collate([(it, train.train_turns(srng, it)) for it in batch])
        b.pop("turn_of", None)
        p = progress()
        tau = args.tau_start * (args.tau_end / args.tau_start) ** min(p, 1.0)
        lr = args.lr * min(1.0, (step + 1) / args.warmup) * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(p, 1.0))))
        for grp in opt.param_groups:
            grp["lr"] = lr
        img_mask = b["input_ids"] == train.video_id
        out_mask = b["labels"] != -100
        B = img_mask.shape[0]
        n_img = int(img_mask.sum(1)[0])

        def decide_train(hidden):
            lg = preds.image_predictor(image_hidden(hidden, img_mask), torch.ones(B, n_img, dtype=torch.bool))
            keep_img = torch.nn.functional.gumbel_softmax(lg, tau=tau, hard=True)[..., 0]  # ST estimator
            tl = preds.text_predictor(hidden)
            keep_txt = torch.nn.functional.gumbel_softmax(tl, tau=tau, hard=True)[..., 0]
            gate = torch.ones(img_mask.shape, dtype=hidden.dtype)
            gate = gate.masked_scatter(img_mask, keep_img.reshape(-1))
            gate = torch.where(out_mask, keep_txt, gate)
            stats["keep_img"], stats["keep_txt"] = keep_img, keep_txt
            return gate

        state.mode, state.decide = "mask", decide_train
        state.img_mask, state.out_mask = img_mask, out_mask
        lm_loss = train.forward(model, b).loss
        state.mode = None
        ki = stats["keep_img"].mean(1)  # per-sample image keep ratio
        bv = ((args.vision_keep_rate - ki) ** 2).mean()
        n_out = out_mask.sum(1)
        kt = (stats["keep_txt"] * out_mask).sum(1) / n_out.clamp_min(1)
        sel = n_out >= args.text_min_output_tokens
        bt = ((args.text_keep_rate - kt[sel]) ** 2).mean() if bool(sel.any()) else lm_loss * 0
        loss = lm_loss + args.lambda_vision * bv + args.lambda_text * bt
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(preds.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        samples += B
        for key, v in (("lm", lm_loss), ("bv", bv), ("bt", bt), ("kv", ki.mean()), ("kt", kt[sel].mean() if bool(sel.any()) else kt.mean())):
            acc[key] += float(v.detach())
        acc["n"] += 1
        recent.append((float(ki.mean()), float(kt[sel].mean()) if bool(sel.any()) else float("nan")))
        del recent[:-100]
        if step % args.log_every == 0:
            n = acc.pop("n")
            log(fh, {"type": "train", "step": step, "epoch": epoch, "samples": samples,
                     "lm_loss": round(acc["lm"] / n, 5), "budget_vision": round(acc["bv"] / n, 6),
                     "budget_text": round(acc["bt"] / n, 6), "keep_image": round(acc["kv"] / n, 4),
                     "keep_text": round(acc["kt"] / n, 4), "tau": round(tau, 4), "lr": round(lr, 7),
                     "grad_norm": round(float(gn), 4), "elapsed_s": round(time.time() - t_train, 1)})
            acc = {"lm": 0.0, "bv": 0.0, "bt": 0.0, "kv": 0.0, "kt": 0.0, "n": 0}
    train_s = time.time() - t_train
    train_keep = None  # no step ran (--init-predictors with --time-budget-min 0)
    if recent:
        texts = [r[1] for r in recent if not math.isnan(r[1])]
        train_keep = {"image": round(float(np.mean([r[0] for r in recent])), 4),
                      "text": round(float(np.mean(texts)), 4) if texts else None}
    log(fh, {"type": "end", "step": step, "samples": samples, "train_s": round(train_s, 1),
             "ended_by": "steps" if step >= args.max_steps else "time",
             "sampled_keep_rate_last_100_steps": train_keep})

    # ---------------- evaluation
    preds.eval()
    val_items = val.items if args.val_items <= 0 else balanced(val.items, args.val_items)
    t_eval = time.time()
    equiv = check_prune_equivalence(model, preds, state, val, val_items, args)
    log(fh, {"type": "check", "prune_vs_mask_max_abs_logit_diff": equiv})
    calibration = None
    if args.calibrate_text_threshold:
        state.text_threshold, calibration = calibrate_text_threshold(model, preds, state, val,
                                                                     val_items, args)
        calibration["threshold"] = round(state.text_threshold, 6)
        log(fh, dict(calibration, type="calibration"))
    results = {}
    for mode in val.eval_modes + ("random_text",):
        if mode == "random_text":
            state.random_text_rate = results["pruned_text"].get("text_keep_rate", 0.5)
        r = evaluate(model, preds, state, val, val_items, args, mode)
        results[mode] = r
        log(fh, dict(r, type="val", elapsed_s=round(time.time() - t_eval, 1)))
    # The full-attention reference of the text-gated run: v1 asks a follow-up for it; v2 scores
    # every turn in every mode, so its full run is the reference.
    results.setdefault("full_two_turn", results["full"])

    # ---------------- save
    tensors = {k: v.detach().contiguous() for k, v in preds.state_dict().items()}
    safetensors.torch.save_file(tensors, os.path.join(out, "predictors.safetensors"),
                                metadata={"format": "pt", "method": "dynamic-llava"})
    W = args.width
    cfg = {
        "method": "Dynamic-LLaVA (Huang et al., ICLR 2025, arXiv 2412.00876), docs/methods.md §3",
        "model": os.path.abspath(args.model),
        "sparse_layer": args.sparse_layer,
        "vision_keep_rate": args.vision_keep_rate,
        "output_text_keep_rate": args.text_keep_rate,
        "output_text_threshold": round(state.text_threshold, 6),
        "keep_channel": 0,
        "hidden_size": tc.hidden_size,
        "predictor_width": W,
        "predictor_params": n_pred,
        "dtype": "float32",
        "image_predictor": {
            "input": f"hidden states entering decoder layer {args.sparse_layer}, at the video/image token "
                     "positions (every <video> placeholder: 4 per frame + image_newline)",
            "architecture": [
                f"in_norm: LayerNorm({tc.hidden_size}, eps 1e-5)", f"in_proj: Linear({tc.hidden_size}->{W}), erf GELU",
                f"blocks.0..{args.blocks - 1}: pre-LN ViT block: x += proj(MHA(norm1(x))) with qkv Linear({W}->{3 * W}) "
                f"split as [q|k|v], {args.heads} heads of {W // args.heads}, softmax(q k^T / sqrt(d)), no mask "
                f"(one sample's image tokens); x += fc2(GELU(fc1(norm2(x)))), fc1 {W}->{W * args.mlp_ratio}",
                f"split: channels [0,{W // 2}) local per token; [{W // 2},{W}) mean-pooled over the (kept = all "
                "valid) image tokens into one global vector, broadcast back; concat [local|global]",
                f"fc1: Linear({W}->{W // 2}), GELU; fc2: Linear({W // 2}->{W // 4}), GELU; fc3: Linear({W // 4}->2)",
            ],
            "inference": "score = log_softmax(logits)[...,0]; keep top-k, k = int(N_img * vision_keep_rate), "
                         "restore original order; drop the others from layers >= sparse_layer; RoPE keeps "
                         "original positions",
        },
        "text_predictor": {
            "input": f"hidden state of each generated token entering decoder layer {args.sparse_layer}",
            "architecture": [
                f"in_norm: LayerNorm({tc.hidden_size}, eps 1e-5)", f"in_proj: Linear({tc.hidden_size}->{W}), GELU",
                f"fc1: Linear({W}->{W // 2}), GELU; fc2: Linear({W // 2}->{W // 4}), GELU; fc3: Linear({W // 4}->2)",
            ],
            "inference": "keep = logits[0] - logits[1] > output_text_threshold (0: argmax; else calibrated "
                         "on the validation answers to keep output_text_keep_rate of them); a dropped "
                         "token attends to itself but its K/V is not appended to the cache of layers "
                         ">= sparse_layer",
            "calibration": calibration,
        },
        "tensors": sorted(tensors),
        "training": {
            "args": vars(args), "steps": step, "samples": samples, "train_seconds": round(train_s, 1),
            "model_frozen": True, "sampled_keep_rate_last_100_steps": train_keep,
            "initialized_from": initialized_from(args.init_predictors),
            "objective": "answer-token CE + lambda_v (r_v - mean image keep)^2 + lambda_t (r_t - mean "
                         "output-text keep)^2; Gumbel-softmax hard + straight-through; masked softmax with "
                         "G_ii = 1 in layers >= sparse_layer; tau exponential tau_start -> tau_end",
            "torch": torch.__version__, "transformers": transformers.__version__,
        },
        "validation": {
            "items": len(val_items),
            "accuracy_full": results["full"]["acc"],
            "accuracy_pruned": results["pruned"]["acc"],
            "accuracy_random_topk": results["random"]["acc"],
            "image_keep_rate": results["pruned"].get("image_keep_rate"),
            "two_turn_accuracy_full": results["full_two_turn"]["acc"],
            "two_turn_accuracy_pruned_image_and_text": results["pruned_text"]["acc"],
            "text_keep_rate": results["pruned_text"].get("text_keep_rate"),
            "two_turn_accuracy_random_text": results["random_text"]["acc"],
            "prune_vs_mask_max_abs_logit_diff": equiv,
            "details": results,
            "eval_seconds": round(time.time() - t_eval, 1),
        },
    }
    with open(os.path.join(out, "predictors_config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    log(fh, {"type": "done", "out": out, "total_s": round(time.time() - t0, 1),
             "val": {k: v for k, v in cfg["validation"].items() if k != "details"}})


if __name__ == "__main__":
    main()
