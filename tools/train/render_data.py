"""Training data rendered on the fly: synthvid scenes drawn inside the DataLoader's workers,
resized by the model's own video processor and packed into rows of whole chats.

No mp4 is written or read (no PyAV): an item is a pure function of (suite, split, index), so a
worker draws the scene (synthvid2.make_item / synthvid.make_item at 128x128), runs the shipped
LlavaOnevisionVideoProcessor with rescale/normalize off (uint8, exactly what the processor
resizes before its fused rescale+normalize, as prepare_data.py caches) and renders the chat
tokens (chat_render.py, through train_v2.Renderer). The frames the served model sees went
through H.264 first; check_render_frames.py measures how much that changes (README.md,
"Frames rendered in the loader").

A step's items are a pure function of (seed, step) (`plan_step`): fresh item indices drawn from
a range of 10^9 per suite, so a run never repeats an item (train_v2c memorised its 4800) and a
resumed run continues with the same stream. `pack` places the chats into rows of `row_tokens`
by first-fit decreasing; position ids restart at 0 for every chat, which makes transformers
build a block-diagonal causal mask (masking_utils.find_packed_sequence_indices), so chats of
any frame count share a row and a step holds a fixed token budget instead of mostly padding.
"""

from __future__ import annotations

import os
import random
import sys
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "synthvid"))
import synthvid  # noqa: E402
import synthvid2  # noqa: E402
from train import sample_turns  # noqa: E402
from train_v2 import Renderer  # noqa: E402

# Item indices are drawn from [start, start + INDEX_RANGE): a 7-minute GPU run takes ~10^5 items,
# so a repeat is rare (birthday bound ~ 1 %) and harmless.
INDEX_RANGE = 10 ** 9
# Text tokens assumed per chat when a step's budget is planned (the packer uses exact lengths):
# a v1 chat is 15-60 tokens, a v2 one 20-110 (describe, multiturn).
TEXT_ESTIMATE = {"v1": 40, "v2": 60}


@dataclass(frozen=True)
class Spec:
    """One chat to render: suite 'v1'|'v2', split, item index; turn_seed >= 0 samples v1's
    follow-ups (training), -1 asks v1's own question alone (evaluation, as v1's eval does)."""
    suite: str
    split: str
    index: int
    turn_seed: int = -1


def num_frames(suite: str, split: str, index: int) -> int:
    """The item's frame count without drawing its scene (both generators fix it first)."""
    if suite == "v2":
        return synthvid2.item_task_and_bucket(index)[1]
    task = synthvid.TASKS[index % len(synthvid.TASKS)]
    rng = synthvid.item_rng(synthvid.SPLIT_SEEDS[split], index)
    return int(rng.choice(synthvid.NEEDLE_LENGTHS if task == "needle" else synthvid.LENGTHS))


def task_of(suite: str, index: int) -> str:
    if suite == "v2":
        return synthvid2.TASKS[index % len(synthvid2.TASKS)]
    return synthvid.TASKS[index % len(synthvid.TASKS)]


def parse_weights(text: str) -> dict:
    """'after=2,describe=0.5' -> {task: weight}; unnamed tasks weigh 1."""
    out = {}
    for kv in filter(None, text.split(",")):
        k, _, v = kv.partition("=")
        if k not in synthvid2.TASKS:
            raise ValueError(f"--task-weights: unknown v2 task {k!r} (tasks: {synthvid2.TASKS})")
        out[k] = float(v)
    return out


def plan_step(seed: int, step: int, tokens: int, tpf: int, v1_share: float,
              task_weights: dict | None = None, max_frames: int = 0) -> list:
    """The training chats of one step: about `tokens` tokens (video + estimated text), each a v1
    chat with probability v1_share, else v2 (v2 tasks kept with probability weight / max
    weight; items over max_frames, when given, are skipped). A pure function of (seed, step)."""
    rng = random.Random((seed * 1_000_003 + step) & 0xFFFFFFFFFFFF)
    w = dict.fromkeys(synthvid2.TASKS, 1.0)
    w.update(task_weights or {})
    wmax = max(w.values())
    specs, total = [], 0
    while total < tokens:
        suite = "v1" if rng.random() < v1_share else "v2"
        index = rng.randrange(INDEX_RANGE)
        if suite == "v2" and rng.random() * wmax >= w[task_of("v2", index)]:
            continue
        F = num_frames(suite, "train", index)
        if max_frames and F > max_frames:
            continue
        specs.append(Spec(suite, "train", index, rng.randrange(1 << 30)))
        total += F * tpf + 1 + TEXT_ESTIMATE[suite]
    return specs


def eval_specs(v2_count: int, v1_count: int) -> list:
    """The first items of each val split: every prefix is balanced over tasks (and v2 lengths)."""
    return ([Spec("v2", "val", i) for i in range(v2_count)] +
            [Spec("v1", "val", i) for i in range(v1_count)])


def plan_eval(specs: list, tokens: int, tpf: int) -> list:
    """Val specs grouped into steps of about `tokens` tokens, in order."""
    out, cur, total = [], [], 0
    for s in specs:
        cur.append(s)
        total += num_frames(s.suite, s.split, s.index) * tpf + 1 + TEXT_ESTIMATE[s.suite]
        if total >= tokens:
            out.append(cur)
            cur, total = [], 0
    if cur:
        out.append(cur)
    return out


def scene_questions(rec: dict) -> list:
    """Questions every v2 scene answers besides its own, in synthvid2's own wording and meaning
    (an appearance is a maximal run of visible frames; first = earlier onset): how many times
    an object that comes back appears (count_long's question), and which of two objects
    appears first (order_far's; the two differ in shape and onset). Objects sharing a colour
    and shape are left out, so every question names one object.

    Objects seen once are not counted: they are most objects of a scene (89 % of the count
    questions would answer "1", where count_long's own answers are spread over 1-6), and with
    them a 12-minute run learned to say "1" (count_long val 50 % -> 20 %, bench/RESULTS.md)."""
    objs = rec["objects"]
    pairs = [(o["color"], o["shape"]) for o in objs]
    named = [o for o, p in zip(objs, pairs) if pairs.count(p) == 1]
    out = [(synthvid2.QUESTION["count_long"].format(color=o["color"], shape=o["shape"]),
            str(len(o["appearances"]))) for o in named if len(o["appearances"]) > 1]
    for a in named:
        for b in named:
            onset_a, onset_b = a["appearances"][0][0], b["appearances"][0][0]
            if a["shape"] != b["shape"] and onset_a < onset_b:
                for x, y in ((a, b), (b, a)):
                    out.append((synthvid2.QUESTION["order_far"].format(
                        color_a=x["color"], shape_a=x["shape"], color_b=y["color"],
                        shape_b=y["shape"]), a["shape"]))
    return out


def turns_of(spec: Spec, rec: dict, extra_turns: int = 0) -> list:
    """[(question, answer)]: every turn of a v2 item (in training, plus up to extra_turns
    training-only scene_questions after them); a v1 item's question with 0-3 sampled follow-ups
    (training) or alone (evaluation)."""
    if spec.suite == "v2":
        turns = [(t["question"], t["answer"]) for t in rec["turns"]]
        if extra_turns and spec.turn_seed >= 0:
            asked = {q for q, _ in turns}
            pool = [qa for qa in scene_questions(rec) if qa[0] not in asked]
            rng = random.Random(spec.turn_seed)
            turns += rng.sample(pool, min(extra_turns, len(pool)))
        return turns
    if spec.turn_seed < 0:
        return [(rec["question"], rec["answer"])]
    return sample_turns(random.Random(spec.turn_seed), rec)


def render_item(spec: Spec):
    """(record, frames [F, 128, 128, 3] uint8) of the scene generator."""
    gen = synthvid2 if spec.suite == "v2" else synthvid
    return gen.make_item(spec.split, spec.index)


def h264_round_trip(frames):
    """The frames after synthvid's mp4 writer (H.264, crf 18, yuv420p) and its PyAV reader."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "item.mp4")
        synthvid.write_mp4(path, frames)
        return synthvid.read_mp4(path)


def resize_runs(video_processor, frames):
    """(uint8 [U, 3, S, S], index [F]): the processor's resize (rescale and normalize off) of
    each run of equal frames once, and which of them every frame is.

    synthvid's still stretches repeat a frame exactly (static backgrounds, integer positions):
    about 3 frames in 10 differ from the one before. The processor resizes every frame on its
    own, so resized[index] is what it gives for all frames; the workers' resize, the copy to
    the GPU and the vision tower each do a third of the work."""
    import numpy as np
    import torch
    new_run = np.ones(len(frames), bool)
    for t in range(1, len(frames)):
        new_run[t] = not np.array_equal(frames[t], frames[t - 1])
    out = video_processor(videos=[frames[new_run]], do_rescale=False, do_normalize=False,
                          return_tensors="pt")["pixel_values_videos"][0]
    assert str(out.dtype) == "torch.uint8", out.dtype
    return out, torch.from_numpy(np.cumsum(new_run) - 1)


def resize_frames(video_processor, frames) -> "torch.Tensor":
    """uint8 [F, 3, S, S]: the processor's resize of every frame (resize_runs, expanded)."""
    runs, index = resize_runs(video_processor, frames)
    return runs[index]


class RenderedChats:
    """Map-style dataset keyed by Spec (DataLoader's batch_sampler hands the specs over)."""

    def __init__(self, tokenizer, video_processor, tpf: int, h264: bool = False,
                 extra_turns: int = 0):
        self.renderer = Renderer(tokenizer)
        self.extra_turns = extra_turns
        self.video_processor = video_processor
        self.tpf = tpf
        # h264: the frames take the files' way instead (synthvid's mp4 writer, then its PyAV
        # reader), for check_render_frames.py; needs PyAV.
        self.h264 = h264

    def __getitem__(self, spec: Spec) -> dict:
        rec, frames = render_item(spec)
        if self.h264:
            frames = h264_round_trip(frames)
        F = rec["num_frames"]
        assert frames.shape[0] == F == num_frames(spec.suite, spec.split, spec.index), spec
        turns = turns_of(spec, rec, self.extra_turns)
        ids, labels, turn_of, _ = self.renderer.render(turns, F * self.tpf + 1)
        task = rec["task"] if spec.suite == "v2" else "v1_" + rec["task"]
        runs, index = resize_runs(self.video_processor, frames)
        return {"spec": spec, "task": task, "turns": len(turns), "num_frames": F,
                "frames": runs, "frame_index": index,
                "ids": ids, "labels": labels, "turn_of": turn_of}


def first_fit_decreasing(lengths: list, capacity: int) -> list:
    """Rows (lists of indices into lengths), each holding at most `capacity`."""
    rows, room = [], []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        for r in range(len(rows)):
            if room[r] >= lengths[i]:
                rows[r].append(i)
                room[r] -= lengths[i]
                break
        else:
            rows.append([i])
            room.append(capacity - lengths[i])
    return rows


def pack(samples: list, row_tokens: int, pad_id: int, tpf: int) -> dict:
    """Chats -> one step's tensors, all built here on the CPU (in the workers), so that the
    training step itself has no data-dependent shapes to wait for on the GPU.

    Rows are `row_tokens` long (or the longest chat); each chat's positions restart at 0 and the
    padding tail is a chat of its own (labels -100). `frames` are the videos' distinct frames
    (resize_runs) and `frame_index` every frame's, in the order the <video> runs appear row by
    row; `video_index` maps every <video> position, in that order, to its row of
    [the frames' tpf rows each; image_newline], so one gather builds what LlavaOnevisionModel
    splices in. `pos` [N, 2] are the (row, position) pairs whose next token is an answer token
    `tgt`; `key` = chat * 64 + turn; `weight` = 1 / sqrt(the turn's answer tokens)."""
    import torch
    lengths = [len(s["ids"]) for s in samples]
    L = max([row_tokens] + lengths)
    rows = first_fit_decreasing(lengths, L)
    R = len(rows)
    ids = torch.full((R, L), pad_id, dtype=torch.long)
    labels = torch.full((R, L), -100, dtype=torch.long)
    turn_of = torch.full((R, L), -1, dtype=torch.long)
    sample_of = torch.full((R, L), -1, dtype=torch.long)
    position_ids = torch.zeros((R, L), dtype=torch.long)
    order = []
    for r, members in enumerate(rows):
        at = 0
        for i in members:
            s, n = samples[i], lengths[i]
            ids[r, at:at + n] = torch.tensor(s["ids"])
            labels[r, at:at + n] = torch.tensor(s["labels"])
            turn_of[r, at:at + n] = torch.tensor(s["turn_of"])
            sample_of[r, at:at + n] = i
            position_ids[r, at:at + n] = torch.arange(n)
            at += n
            order.append(i)
        position_ids[r, at:] = torch.arange(L - at)
    frames_per_video = [samples[i]["num_frames"] for i in order]
    run_starts, distinct = [], 0
    for i in order:
        run_starts.append(distinct)
        distinct += len(samples[i]["frames"])
    newline = sum(frames_per_video) * tpf
    index, first = [], 0
    for F in frames_per_video:
        index += list(range(first, first + F * tpf)) + [newline]
        first += F * tpf
    nxt = labels[:, 1:]
    pos = (nxt != -100).nonzero()
    key = sample_of[pos[:, 0], pos[:, 1]] * 64 + turn_of[pos[:, 0], pos[:, 1] + 1]
    _, inverse, counts = torch.unique(key, return_inverse=True, return_counts=True)
    return {
        "ids": ids, "labels": labels, "turn_of": turn_of, "sample_of": sample_of,
        "position_ids": position_ids,
        "frames": torch.cat([samples[i]["frames"] for i in order]),
        "frame_index": torch.cat([samples[i]["frame_index"] + first_run
                                  for i, first_run in zip(order, run_starts)]),
        "frames_per_video": frames_per_video, "video_index": torch.tensor(index),
        "pos": pos, "tgt": nxt[pos[:, 0], pos[:, 1]], "key": key,
        "weight": counts[inverse].float().rsqrt(),
        "specs": [s["spec"] for s in samples],
        "tasks": [s["task"] for s in samples], "turns": [s["turns"] for s in samples],
        "suites": [s["spec"].suite for s in samples],
        "real_tokens": sum(lengths), "row_tokens": R * L,
    }


class Packer:
    """collate_fn for the DataLoader (runs in the workers)."""

    def __init__(self, row_tokens: int, pad_id: int, tpf: int):
        self.row_tokens = row_tokens
        self.pad_id = pad_id
        self.tpf = tpf

    def __call__(self, samples):
        return pack(samples, self.row_tokens, self.pad_id, self.tpf)


class StepPlan:
    """batch_sampler: the specs of steps first_step, first_step + 1, ... (endless)."""

    def __init__(self, first_step: int, **plan_kwargs):
        self.first_step = first_step
        self.kw = plan_kwargs

    def __iter__(self):
        step = self.first_step
        while True:
            yield plan_step(step=step, **self.kw)
            step += 1


def worker_init(_):
    import torch
    torch.set_num_threads(1)


def loader(dataset, batch_sampler, packer, workers: int, pin_memory: bool, prefetch: int = 4):
    import torch
    kw = {}
    if workers > 0:
        kw = {"worker_init_fn": worker_init, "prefetch_factor": prefetch,
              "persistent_workers": False}
    return torch.utils.data.DataLoader(dataset, batch_sampler=batch_sampler, collate_fn=packer,
                                       num_workers=workers, pin_memory=pin_memory, **kw)


def to_chw_float(frames_u8, device):
    """uint8 [N, 3, S, S] -> float32 on device, (u8 - 127.5) / 127.5: bit-identical to the
    processor's fused rescale (1/255) + normalize (mean = std = 0.5) (README.md, step 2)."""
    x = frames_u8.to(device, non_blocking=True).float()
    return (x - 127.5) / 127.5


def main():
    """Padding of the packed rows for a step size, from the chats' exact lengths (scenes drawn,
    no frames): `render_data.py --tokens-per-step 65536 --row-tokens 4096 --steps 20`."""
    import argparse
    import json
    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--model", default="models/framezip-tiny-video")
    ap.add_argument("--tokens-per-step", type=int, default=65536)
    ap.add_argument("--row-tokens", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--v1-share", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--render", type=int, default=0, metavar="N",
                    help="also render, resize and pack the first N steps in this one process, "
                         "as a worker does, and report its throughput")
    args = ap.parse_args()
    import time
    import torch
    from transformers import AutoProcessor, AutoTokenizer
    torch.set_num_threads(1)
    renderer = Renderer(AutoTokenizer.from_pretrained(args.model))
    tpf = 4
    real = rows = chats = naive = 0
    per_step_rows = []
    for step in range(args.steps):
        specs = plan_step(args.seed, step, args.tokens_per_step, tpf, args.v1_share)
        lengths = []
        for s in specs:
            gen = synthvid2 if s.suite == "v2" else synthvid
            rec, _ = gen.make_item(s.split, s.index, render_frames=False)
            lengths.append(len(renderer.render(turns_of(s, rec), rec["num_frames"] * tpf + 1)[0]))
        L = max([args.row_tokens] + lengths)
        n_rows = len(first_fit_decreasing(lengths, L))
        real += sum(lengths)
        rows += n_rows * L
        naive += len(lengths) * max(lengths)  # one chat a row, padded to the longest
        chats += len(specs)
        per_step_rows.append(n_rows)
    worker = {}
    if args.render:
        proc = AutoProcessor.from_pretrained(args.model)
        data = RenderedChats(proc.tokenizer, proc.video_processor, tpf)
        t, frames, distinct, toks = time.time(), 0, 0, 0
        for step in range(args.render):
            b = pack([data[s] for s in plan_step(args.seed, step, args.tokens_per_step, tpf,
                                                 args.v1_share)],
                     args.row_tokens, renderer.pad_id, tpf)
            frames += len(b["frame_index"])
            distinct += len(b["frames"])
            toks += b["real_tokens"]
        dt = time.time() - t
        worker = {"worker_frames_per_s": round(frames / dt), "worker_tokens_per_s": round(toks / dt),
                  "worker_s_per_step": round(dt / args.render, 2),
                  "distinct_frames": round(distinct / frames, 4)}
    print(json.dumps({**worker, "tokens_per_step": args.tokens_per_step, "row_tokens": args.row_tokens,
                      "steps": args.steps, "chats_per_step": round(chats / args.steps, 1),
                      "real_tokens_per_step": round(real / args.steps),
                      "rows_per_step": per_step_rows, "padding": round(1 - real / rows, 4),
                      "padding_one_chat_a_row": round(1 - real / naive, 4)}))


if __name__ == "__main__":
    main()
