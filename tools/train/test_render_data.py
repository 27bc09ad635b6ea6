#!/usr/bin/env python3
"""Checks of render_data.py and train_render.py's packed forward (CPU, ~20 s).

  .venv/bin/python tools/train/test_render_data.py      # or: pytest tools/train/test_render_data.py

The model checks use a freshly initialised model (fzmodel.py's architecture, a new random seed
each run), so they hold for any weights, not for one checkpoint's.
"""

from __future__ import annotations

import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import render_data as rd  # noqa: E402
import synthvid2  # noqa: E402  (render_data put tools/synthvid on the path)

_CACHE = {}


def fresh_model():
    """(model, processor, dataset, tpf) of a random fzmodel.py model, built once per process."""
    if "m" not in _CACHE:
        import torch
        from transformers import LlavaOnevisionForConditionalGeneration
        import fzmodel
        torch.set_num_threads(1)
        tok = fzmodel.wrap_tokenizer(fzmodel.build_tokenizer(fzmodel.ARCH["bpe_vocab"]))
        processor = fzmodel.build_processor(tok)
        cfg = fzmodel.build_config(tok)
        cfg._attn_implementation = "sdpa"
        seed = random.SystemRandom().randrange(1 << 31)
        torch.manual_seed(seed)
        model = LlavaOnevisionForConditionalGeneration(cfg).eval()
        # A fresh init's logits are nearly flat; larger weights make a wrong mask visible.
        with torch.no_grad():
            for p in model.parameters():
                if p.ndim >= 2:
                    p.mul_(4.0)
        tpf = fzmodel.video_tokens_per_frame()
        _CACHE["m"] = (model, processor, rd.RenderedChats(tok, processor.video_processor, tpf),
                       tpf, seed)
    return _CACHE["m"]


def test_direct_frames_equal_processor_pixels():
    """The loader's uint8 frames, normalised on the device, are exactly the processor's
    pixel_values_videos for the same 128x128 frames."""
    import torch
    _, processor, _, _, _ = fresh_model()
    for spec in (rd.Spec("v2", "val", 5), rd.Spec("v2", "val", 9), rd.Spec("v1", "val", 3)):
        _, raw = rd.render_item(spec)
        # resize_frames resizes each run of equal frames once: the item must have such runs.
        assert spec.suite == "v1" or any((raw[t] == raw[t - 1]).all() for t in range(1, len(raw)))
        ours = rd.to_chw_float(rd.resize_frames(processor.video_processor, raw),
                               torch.device("cpu"))
        ref = processor.video_processor(videos=[raw], return_tensors="pt")["pixel_values_videos"][0]
        assert ours.shape == ref.shape, (ours.shape, ref.shape)
        assert torch.equal(ours, ref.float()), (ours - ref).abs().max()


def test_pack_layout():
    """Every chat lands whole in one row, positions restart at 0, the rest is padding with no
    labels, and frames come in the order of the rows' <video> runs."""
    import torch
    rng = random.Random()
    vid, pad = 7, 0
    samples = []
    for i in range(rng.randrange(3, 12)):
        F = rng.choice([1, 2, 3, 5])
        pre, post = rng.randrange(1, 6), rng.randrange(2, 9)
        ids = [100 + i] * pre + [vid] * (F * 4 + 1) + [200 + i] * post
        labels = [-100] * (len(ids) - 2) + [300 + i, 301 + i]
        turn_of = [-1] * (len(ids) - 2) + [0, 0]
        # Distinct frames hold (chat, run); frame_index repeats some of them.
        runs = rng.randrange(1, F + 1)
        frames = torch.stack([torch.full((3, 2, 2), 16 * i + u, dtype=torch.uint8)
                              for u in range(runs)])
        index = torch.tensor(sorted(rng.choices(range(runs), k=F - runs) + list(range(runs))))
        samples.append({"spec": rd.Spec("v1", "val", i), "task": "t", "turns": 1,
                        "num_frames": F, "frames": frames, "frame_index": index, "ids": ids,
                        "labels": labels, "turn_of": turn_of})
    row = rng.randrange(max(len(s["ids"]) for s in samples), 120)
    b = rd.pack(samples, row, pad, 4)
    R, L = b["ids"].shape
    assert L == row and b["real_tokens"] == sum(len(s["ids"]) for s in samples)
    for i, s in enumerate(samples):
        where = (b["sample_of"] == i).nonzero()
        assert where[:, 0].unique().numel() == 1, "a chat spans rows"
        r, cols = where[0, 0], where[:, 1]
        assert torch.equal(cols, torch.arange(cols[0], cols[0] + len(s["ids"])))
        assert b["ids"][r, cols].tolist() == s["ids"]
        assert b["labels"][r, cols].tolist() == s["labels"]
        assert torch.equal(b["position_ids"][r, cols], torch.arange(len(s["ids"])))
    pad_mask = b["sample_of"] < 0
    assert (b["labels"][pad_mask] == -100).all() and (b["ids"][pad_mask] == pad).all()
    # Frames: the chat owning each <video> run, row by row, must match the frames' fill value.
    owners = []
    for r in range(R):
        for c in range(L):
            if b["ids"][r, c] == vid and (c == 0 or b["ids"][r, c - 1] != vid):
                owners.append(int(b["sample_of"][r, c]))
    every = b["frames"][b["frame_index"]]
    videos = every.split(b["frames_per_video"])
    assert [int(f[0, 0, 0, 0]) // 16 for f in videos] == owners
    for f in videos:
        i = int(f[0, 0, 0, 0]) // 16
        assert torch.equal(f, samples[i]["frames"][samples[i]["frame_index"]])
    # video_index: each run's F * 4 frame rows in order, then the newline row (the last one).
    newline = len(b["frame_index"]) * 4
    expect, first = [], 0
    for F in b["frames_per_video"]:
        expect += list(range(first, first + 4 * F)) + [newline]
        first += 4 * F
    assert b["video_index"].tolist() == expect
    assert len(expect) == int((b["ids"] == vid).sum())
    # Answer positions: the tokens before each labelled one; weights 1/sqrt(turn length).
    assert torch.equal(b["tgt"], b["labels"][b["pos"][:, 0], b["pos"][:, 1] + 1])
    assert len(b["tgt"]) == 2 * len(samples)
    assert torch.allclose(b["weight"], torch.full_like(b["weight"], 2 ** -0.5))


def test_packed_forward_matches_transformers():
    """Chats packed into one row give transformers' own per-chat logits (processor + model on the
    raw frames); with the chats' position ids not restarted (one causal mask over the row) they
    do not, so the check can fail."""
    import torch
    from train_render import check_packed_forward, packed_logits, to_device
    model, processor, data, tpf, seed = fresh_model()
    err = check_packed_forward(model, processor, data, torch.device("cpu"), tpf, count=4)
    assert err < 1e-3, (err, seed)
    samples = [data[s] for s in rd.eval_specs(2, 2)]
    b = rd.pack(samples, sum(len(s["ids"]) for s in samples), data.renderer.pad_id, tpf)
    frames = rd.to_chw_float(b["frames"], torch.device("cpu"))
    with torch.no_grad():
        good = packed_logits(model, to_device(b, "cpu"), frames, False)
        flat = dict(b, position_ids=torch.arange(b["ids"].shape[1])[None])
        bad = packed_logits(model, flat, frames, False)
    assert (good - bad).abs().max().item() > 1e-2, "a row-wide causal mask went unnoticed"


def test_plan_step():
    """A step's chats are a pure function of (seed, step), fill the token budget, respect
    --max-frames and the task weights (weight 0 = never)."""
    kw = dict(seed=3, tokens=20000, tpf=4, v1_share=0.3)
    a = rd.plan_step(step=7, **kw)
    assert a == rd.plan_step(step=7, **kw) and a != rd.plan_step(step=8, **kw)
    est = sum(rd.num_frames(s.suite, s.split, s.index) * 4 + 1 + rd.TEXT_ESTIMATE[s.suite]
              for s in a)
    assert est >= 20000
    b = rd.plan_step(step=1, max_frames=128, task_weights={"describe": 0.0}, **kw)
    assert all(rd.num_frames(s.suite, s.split, s.index) <= 128 for s in b)
    assert not any(s.suite == "v2" and rd.task_of("v2", s.index) == "describe" for s in b)


def test_num_frames_matches_generators():
    """num_frames (no scene drawn) agrees with the rendered items."""
    rng = random.Random()
    for suite in ("v1", "v2"):
        for _ in range(6):
            spec = rd.Spec(suite, "train", rng.randrange(rd.INDEX_RANGE))
            rec, frames = rd.render_item(spec)
            assert rd.num_frames(suite, "train", spec.index) == rec["num_frames"] == len(frames)


def test_scene_questions_agree_with_the_generator():
    """The training-only questions ask what synthvid2's own questions ask and answer them the
    same: every count_long and order_far item's question is among its scene_questions with its
    answer, and so is a multiturn session's count about its object (objects seen once are not
    asked about)."""
    rng = random.Random()
    checked = {"count_long": 0, "order_far": 0, "multiturn": 0}
    while min(checked.values()) < 8:
        spec = rd.Spec("v2", "train", rng.randrange(rd.INDEX_RANGE), rng.randrange(1 << 30))
        task = rd.task_of("v2", spec.index)
        if task not in checked:
            continue
        rec, _ = synthvid2.make_item(spec.split, spec.index, render_frames=False)
        pool = dict(rd.scene_questions(rec))
        if task == "multiturn":
            color, shape = rec["meta"]["target"]
            q = synthvid2.QUESTION["count_long"].format(color=color, shape=shape)
            want = str(len(rec["meta"]["appearances"]))
            assert pool.get(q, "1") == want, (spec, q, pool.get(q), want)
        elif rec["turns"][0]["answer"] != "1":
            t = rec["turns"][0]
            assert pool.get(t["question"]) == t["answer"], (spec, t, pool.get(t["question"]))
        assert all(a != "1" for q, a in pool.items() if q.startswith("How many"))
        checked[task] += 1
        turns = rd.turns_of(spec, rec, extra_turns=3)
        assert turns[:len(rec["turns"])] == [(t["question"], t["answer"]) for t in rec["turns"]]
        assert len(turns) <= len(rec["turns"]) + 3
        assert all(pool[q] == a for q, a in turns[len(rec["turns"]):])
        # Evaluation chats (turn_seed -1) get no extra turns.
        assert len(rd.turns_of(rd.Spec("v2", "val", spec.index), rec, 3)) == len(rec["turns"])


def test_h264_round_trip_is_close():
    """The mp4 pipeline's frames stay close to the direct ones after the processor's resize
    (check_render_frames.py measures the whole val split)."""
    try:
        import av  # noqa: F401
    except ImportError:
        print("SKIP test_h264_round_trip_is_close: no PyAV here (the mp4 side needs it)")
        return
    import numpy as np
    _, processor, _, _, _ = fresh_model()
    for spec in (rd.Spec("v2", "val", 1), rd.Spec("v1", "val", 2)):
        _, raw = rd.render_item(spec)
        a = rd.resize_frames(processor.video_processor, raw).numpy().astype(np.int16)
        b = rd.resize_frames(processor.video_processor, rd.h264_round_trip(raw)).numpy()
        d = np.abs(a - b.astype(np.int16))
        assert d.mean() < 3.0 and d.max() < 128, (spec, d.mean(), d.max())


if __name__ == "__main__":
    for name, fn in list(globals().items()):
        if name.startswith("test_") and callable(fn):
            fn()
            print("ok", name, flush=True)
