#!/usr/bin/env python3
"""synthvid: deterministic generator of short synthetic videos with question/answer pairs.

Scenes of moving coloured shapes on textured or noisy backgrounds, with static stretches.
Six tasks need different amounts of the video (see README.md). Every item is a pure function of
(split seed, item index), so any split can be regenerated bit-exactly from its seed.

Usage:
  synthvid.py --split test --count 600 --out .data/synthvid          # writes videos + test.jsonl
  synthvid.py --split train --count 12000 --out .data/synthvid --no-video --frames-npy
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import dataclass, field

import numpy as np
from PIL import Image, ImageDraw

GENERATOR_VERSION = 1

# Canvas the scenes are rendered at (the model's processor resizes to its own input size).
CANVAS = 128
FPS = 8

SPLIT_SEEDS = {"train": 1001, "val": 2002, "test": 3003}

COLORS = {
    "red": (220, 40, 40),
    "green": (40, 175, 60),
    "blue": (45, 75, 235),
    "yellow": (235, 215, 40),
    "purple": (150, 50, 205),
    "cyan": (40, 215, 220),
}
SHAPES = ["circle", "square", "triangle", "cross"]
DIRECTIONS = ["left", "right", "up", "down"]
TASKS = ["color", "shape", "direction", "count", "order", "needle"]

# Frame counts a video may have. All frames of the file are the model's sampled frames.
LENGTHS = [8, 16, 24, 32, 48, 64]
NEEDLE_LENGTHS = [32, 48, 64]

QUESTION = {
    "color": "What color is the {shape}?",
    "shape": "What shape is the {color} object?",
    "direction": "Which way does the {color} {shape} move?",
    "count": "How many times does the {color} {shape} appear?",
    "order": "Which appears first, the {color_a} {shape_a} or the {color_b} {shape_b}?",
    "needle": "A {shape} appears briefly. What color is it?",
}


@dataclass
class Obj:
    shape: str
    color: str
    radius: float
    # Per frame centre (x, y) in canvas pixels, or None when the object is not visible.
    track: list = field(default_factory=list)

    def visible_frames(self) -> int:
        return sum(1 for p in self.track if p is not None)


# --------------------------------------------------------------------------------------------
# Rendering


def make_background(rng: np.random.Generator, size: int) -> np.ndarray:
    kind = rng.choice(["noise", "stripes", "checker", "blotches", "gradient"])
    base = rng.uniform(70, 170)
    tint = rng.uniform(-18, 18, size=3)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    if kind == "noise":
        tex = rng.normal(0, rng.uniform(8, 20), size=(size, size)).astype(np.float32)
    elif kind == "stripes":
        period = rng.uniform(6, 20)
        ang = rng.uniform(0, math.pi)
        tex = 18 * np.sin(2 * math.pi * (xx * math.cos(ang) + yy * math.sin(ang)) / period)
    elif kind == "checker":
        cell = int(rng.integers(6, 18))
        tex = np.where(((xx // cell) + (yy // cell)) % 2 == 0, 14.0, -14.0).astype(np.float32)
    elif kind == "blotches":
        small = rng.normal(0, 22, size=(8, 8)).astype(np.float32)
        tex = np.asarray(
            Image.fromarray(small, mode="F").resize((size, size), Image.BICUBIC), np.float32)
    else:
        ang = rng.uniform(0, 2 * math.pi)
        tex = 30 * ((xx * math.cos(ang) + yy * math.sin(ang)) / size - 0.5)
    tex = tex + rng.normal(0, 4, size=(size, size)).astype(np.float32)
    bg = base + tex[..., None] + tint[None, None, :]
    return np.clip(bg, 0, 255).astype(np.uint8)


def draw_shape(draw: ImageDraw.ImageDraw, shape: str, cx: float, cy: float, r: float, rgb):
    if shape == "circle":
        draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=rgb)
    elif shape == "square":
        s = r * 0.86
        draw.rectangle([cx - s, cy - s, cx + s, cy + s], fill=rgb)
    elif shape == "triangle":
        draw.polygon([(cx, cy - r), (cx + r * 1.05, cy + r * 0.8), (cx - r * 1.05, cy + r * 0.8)],
                     fill=rgb)
    elif shape == "cross":
        t = r * 0.36
        draw.rectangle([cx - r, cy - t, cx + r, cy + t], fill=rgb)
        draw.rectangle([cx - t, cy - r, cx + t, cy + r], fill=rgb)
    else:
        raise ValueError(shape)


def render(rng: np.random.Generator, objs: list, num_frames: int, size: int = CANVAS) -> np.ndarray:
    bg = make_background(rng, size)
    temporal_noise = float(rng.choice([0.0, 0.0, 2.0, 4.0]))
    frames = np.empty((num_frames, size, size, 3), np.uint8)
    for t in range(num_frames):
        img = Image.fromarray(bg)
        draw = ImageDraw.Draw(img)
        for o in objs:
            p = o.track[t]
            if p is not None:
                draw_shape(draw, o.shape, p[0], p[1], o.radius, COLORS[o.color])
        arr = np.asarray(img)
        if temporal_noise > 0:
            noise = rng.normal(0, temporal_noise, size=arr.shape)
            arr = np.clip(arr.astype(np.float32) + noise, 0, 255).astype(np.uint8)
        frames[t] = arr
    return frames


# --------------------------------------------------------------------------------------------
# Motion helpers


def rand_pos(rng, r, size=CANVAS, margin=4):
    lo = r + margin
    hi = size - r - margin
    return (float(rng.uniform(lo, hi)), float(rng.uniform(lo, hi)))


def wander_track(rng, r, num_frames, moving_prob=0.6):
    """Positions alternating between holds (static stretches) and straight moves."""
    pos = rand_pos(rng, r)
    track = []
    moving = rng.random() < moving_prob
    t = 0
    while t < num_frames:
        seg = int(rng.integers(3, max(4, num_frames // 3) + 1))
        if moving and rng.random() < 0.5:
            target = rand_pos(rng, r)
            for k in range(seg):
                a = (k + 1) / seg
                track.append((pos[0] + (target[0] - pos[0]) * a, pos[1] + (target[1] - pos[1]) * a))
            pos = target
        else:
            track.extend([pos] * seg)
        t += seg
    return track[:num_frames]


def static_track(pos, num_frames):
    return [pos] * num_frames


def pick_objects(rng, n):
    shapes = list(rng.permutation(SHAPES)[:n])
    colors = list(rng.permutation(list(COLORS))[:n])
    return [Obj(shape=str(s), color=str(c), radius=float(rng.uniform(11, 15)))
            for s, c in zip(shapes, colors)]


def far_from(rng, r, others, min_dist, tries=50):
    best, best_d = None, -1.0
    for _ in range(tries):
        p = rand_pos(rng, r)
        d = min([math.hypot(p[0] - q[0], p[1] - q[1]) for q in others] or [1e9])
        if d >= min_dist:
            return p
        if d > best_d:
            best, best_d = p, d
    return best


# --------------------------------------------------------------------------------------------
# Tasks. Each returns (objs, question, answer, meta).


def task_color(rng, F):
    n = int(rng.integers(1, 4))
    objs = pick_objects(rng, n)
    for o in objs:
        o.track = wander_track(rng, o.radius, F)
    tgt = objs[int(rng.integers(n))]
    return objs, QUESTION["color"].format(shape=tgt.shape), tgt.color, {"target": tgt.shape}


def task_shape(rng, F):
    n = int(rng.integers(1, 4))
    objs = pick_objects(rng, n)
    for o in objs:
        o.track = wander_track(rng, o.radius, F)
    tgt = objs[int(rng.integers(n))]
    return objs, QUESTION["shape"].format(color=tgt.color), tgt.shape, {"target": tgt.color}


def task_direction(rng, F):
    n = int(rng.integers(1, 3))
    objs = pick_objects(rng, n)
    tgt = objs[0]
    d = str(rng.choice(DIRECTIONS))
    r = tgt.radius
    lo, hi = r + 4, CANVAS - r - 4
    dist = float(rng.uniform(45, hi - lo))
    move_len = int(rng.integers(max(3, F // 4), max(4, (3 * F) // 4) + 1))
    start_t = int(rng.integers(0, F - move_len + 1))
    # Start point so that the whole move stays inside the canvas.
    along0 = float(rng.uniform(lo, hi - dist))
    cross = float(rng.uniform(lo, hi))
    sign = 1.0 if d in ("right", "down") else -1.0
    a_start = along0 if sign > 0 else along0 + dist

    def at(a):
        return (a, cross) if d in ("left", "right") else (cross, a)

    track = []
    for t in range(F):
        k = min(max(t - start_t + 1, 0), move_len)
        track.append(at(a_start + sign * dist * k / move_len))
    tgt.track = track
    for o in objs[1:]:
        o.track = static_track(far_from(rng, o.radius, [track[0], track[-1]], 30), F)
    q = QUESTION["direction"].format(color=tgt.color, shape=tgt.shape)
    return objs, q, d, {"move_start": start_t, "move_len": move_len}


def task_count(rng, F):
    n = int(rng.integers(1, 3))
    objs = pick_objects(rng, n)
    tgt = objs[0]
    kmax = min(4, (F + 2) // 4)  # appearances >= 2 frames, gaps >= 2 frames
    k = int(rng.integers(1, kmax + 1))
    # Split F frames into: lead gap, (appear, gap)*, with appear>=2, inner gaps>=2.
    need = 2 * k + 2 * (k - 1)
    spare = F - need
    # Distribute spare frames among 2k+1 slots (lead, a1, g1, ..., ak, tail).
    cuts = np.sort(rng.integers(0, spare + 1, size=2 * k))
    parts = np.diff(np.concatenate([[0], cuts, [spare]])).tolist()
    track = []
    events = []
    t = 0
    track.extend([None] * parts[0])
    t += parts[0]
    for i in range(k):
        a = 2 + parts[1 + 2 * i]
        pos = rand_pos(rng, tgt.radius)
        events.append([t, t + a])
        track.extend([pos] * a)
        t += a
        gap = parts[2 + 2 * i] + (2 if i < k - 1 else 0)
        track.extend([None] * gap)
        t += gap
    assert len(track) == F, (len(track), F)
    tgt.track = track
    # Distractors stay still, so every appearance event in the video belongs to the target.
    for o in objs[1:]:
        o.track = static_track(far_from(rng, o.radius, [], 0), F)
    q = QUESTION["count"].format(color=tgt.color, shape=tgt.shape)
    return objs, q, str(k), {"appearances": events}


def task_order(rng, F):
    n = int(rng.integers(2, 4))
    objs = pick_objects(rng, n)
    a, b = objs[0], objs[1]
    min_gap = max(2, F // 8)
    ta = int(rng.integers(0, F - min_gap - 1))
    tb = int(rng.integers(ta + min_gap, F - 1))
    ends = []
    for o, ts in ((a, ta), (b, tb)):
        te = F if rng.random() < 0.6 else int(rng.integers(ts + 2, F + 1))
        ends.append(te)
        track = wander_track(rng, o.radius, F, moving_prob=0.4)
        o.track = [track[t] if ts <= t < te else None for t in range(F)]
    for o in objs[2:]:
        o.track = wander_track(rng, o.radius, F, moving_prob=0.4)
    first = a
    pair = [a, b] if rng.random() < 0.5 else [b, a]
    q = QUESTION["order"].format(color_a=pair[0].color, shape_a=pair[0].shape,
                                 color_b=pair[1].color, shape_b=pair[1].shape)
    return objs, q, first.shape, {"first": [ta, ends[0]], "second": [tb, ends[1]]}


def task_needle(rng, F):
    n = int(rng.integers(2, 4))
    objs = pick_objects(rng, n)
    needle = objs[-1]
    dur = int(rng.integers(2, 4))
    t0 = int(rng.integers(1, F - dur))
    pos = rand_pos(rng, needle.radius)
    needle.track = [pos if t0 <= t < t0 + dur else None for t in range(F)]
    for o in objs[:-1]:
        o.track = wander_track(rng, o.radius, F, moving_prob=0.5)
    q = QUESTION["needle"].format(shape=needle.shape)
    return objs, q, needle.color, {"needle": [t0, t0 + dur]}


TASK_FNS = {"color": task_color, "shape": task_shape, "direction": task_direction,
            "count": task_count, "order": task_order, "needle": task_needle}


def followup_questions(objs, F):
    """Attribute questions valid for any scene (objects visible for >= 4 frames)."""
    out = []
    for o in objs:
        if o.visible_frames() >= min(4, F):
            out.append({"task": "color", "question": QUESTION["color"].format(shape=o.shape),
                        "answer": o.color})
            out.append({"task": "shape", "question": QUESTION["shape"].format(color=o.color),
                        "answer": o.shape})
    return out


# --------------------------------------------------------------------------------------------
# Items


def item_rng(split_seed: int, index: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([GENERATOR_VERSION, split_seed, index]))


def make_scene(split: str, index: int, seed: int | None = None):
    """The scene of an item before rendering: (rng, task, F, objects with tracks, q, a, meta)."""
    split_seed = SPLIT_SEEDS[split] if seed is None else seed
    rng = item_rng(split_seed, index)
    task = TASKS[index % len(TASKS)]
    F = int(rng.choice(NEEDLE_LENGTHS if task == "needle" else LENGTHS))
    objs, q, a, meta = TASK_FNS[task](rng, F)
    return rng, task, F, objs, q, a, meta


def make_item(split: str, index: int, seed: int | None = None, render_frames: bool = True):
    """Returns (record, frames[F, H, W, 3] uint8 or None when render_frames is False)."""
    rng, task, F, objs, q, a, meta = make_scene(split, index, seed)
    frames = render(rng, objs, F) if render_frames else None
    vid = f"{split}-{index:06d}"
    rec = {
        "id": vid,
        "video": f"videos/{vid}.mp4",
        "num_frames": F,
        "fps": FPS,
        "task": task,
        "question": q,
        "answer": a,
        "followups": followup_questions(objs, F),
        "objects": [{"shape": o.shape, "color": o.color,
                     "visible_frames": o.visible_frames()} for o in objs],
        "meta": meta,
    }
    return rec, frames


def write_mp4(path: str, frames: np.ndarray, fps: int = FPS, crf: int = 18):
    """H.264 (libx264, yuv420p, single-threaded, bitexact) in an mp4 container."""
    import av  # noqa: PLC0415

    tmp = path + ".part"
    with av.open(tmp, mode="w", format="mp4",
                 options={"fflags": "+bitexact"}) as out:
        st = out.add_stream("libx264", rate=fps)
        st.width = frames.shape[2]
        st.height = frames.shape[1]
        st.pix_fmt = "yuv420p"
        st.codec_context.options = {"crf": str(crf), "preset": "medium", "threads": "1",
                                     "x264-params": "threads=1:lookahead-threads=1",
                                     "flags": "+bitexact"}
        for f in frames:
            vf = av.VideoFrame.from_ndarray(np.ascontiguousarray(f), format="rgb24")
            for pkt in st.encode(vf):
                out.mux(pkt)
        for pkt in st.encode(None):
            out.mux(pkt)
    os.replace(tmp, path)


def read_mp4(path: str) -> np.ndarray:
    """Decodes every frame to RGB24 (libavcodec h264 + swscale default conversion)."""
    import av  # noqa: PLC0415

    with av.open(path) as c:
        return np.stack([f.to_ndarray(format="rgb24") for f in c.decode(video=0)])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--split", required=True, choices=list(SPLIT_SEEDS))
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--start", type=int, default=0, help="first item index")
    ap.add_argument("--out", required=True, help="output folder (videos/ and <split>.jsonl)")
    ap.add_argument("--seed", type=int, default=None, help="override the split seed")
    ap.add_argument("--shard", default="0/1", help="k/n: generate indices with i %% n == k")
    ap.add_argument("--merge", type=int, default=0,
                    help="merge the N shard JSONLs of this split into <split>.jsonl and exit")
    ap.add_argument("--manifest", default=None,
                    help="write a manifest (id, video, num_frames, task, question, answer, sha256 of "
                         "the mp4) of the already generated <split>.jsonl to this path and exit")
    ap.add_argument("--verify", default=None,
                    help="check the generated split against this manifest and exit")
    args = ap.parse_args(argv)

    if args.manifest or args.verify:
        import hashlib
        with open(os.path.join(args.out, f"{args.split}.jsonl")) as f:
            recs = [json.loads(line) for line in f]
        rows = []
        for r in recs:
            with open(os.path.join(args.out, r["video"]), "rb") as vf:
                h = hashlib.sha256(vf.read()).hexdigest()
            rows.append({k: r[k] for k in ("id", "video", "num_frames", "task", "question", "answer")}
                        | {"sha256": h})
        if args.manifest:
            with open(args.manifest, "w") as f:
                for row in rows:
                    f.write(json.dumps(row) + "\n")
            print(f"manifest: {len(rows)} items", file=sys.stderr)
            return
        with open(args.verify) as f:
            ref = [json.loads(line) for line in f]
        qa = sum(1 for a, b in zip(rows, ref) if {**a, "sha256": ""} == {**b, "sha256": ""})
        same = sum(1 for a, b in zip(rows, ref) if a == b)
        print(f"{len(ref)} in manifest, {len(rows)} generated; questions/answers equal: {qa}; "
              f"videos byte-identical: {same}", file=sys.stderr)
        sys.exit(0 if qa == len(ref) == len(rows) else 1)

    if args.merge:
        recs = []
        for k in range(args.merge):
            with open(os.path.join(args.out, f"{args.split}.jsonl.{k}of{args.merge}")) as f:
                recs += [json.loads(line) for line in f]
        recs.sort(key=lambda r: r["id"])
        with open(os.path.join(args.out, f"{args.split}.jsonl"), "w") as f:
            for r in recs:
                f.write(json.dumps(r) + "\n")
        print(f"merged {len(recs)} records", file=sys.stderr)
        return

    k, n = (int(x) for x in args.shard.split("/"))
    os.makedirs(os.path.join(args.out, "videos"), exist_ok=True)
    suffix = "" if n == 1 else f".{k}of{n}"
    jpath = os.path.join(args.out, f"{args.split}.jsonl{suffix}")
    with open(jpath, "w") as jf:
        for i in range(args.start, args.start + args.count):
            if i % n != k:
                continue
            rec, _ = make_item(args.split, i, args.seed, render_frames=False)
            vpath = os.path.join(args.out, rec["video"])
            if not os.path.exists(vpath):
                rec, frames = make_item(args.split, i, args.seed)
                write_mp4(vpath, frames)
            jf.write(json.dumps(rec) + "\n")
            if (i - args.start) % 500 == 0:
                print(f"{args.split}: {i - args.start}/{args.count}", file=sys.stderr, flush=True)
    print(f"wrote {jpath}", file=sys.stderr)


if __name__ == "__main__":
    main()
