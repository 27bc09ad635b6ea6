#!/usr/bin/env python3
"""synthvid2: deterministic generator of long and multi-turn synthetic video QA (v2).

Same scenes as synthvid.py (v1): coloured shapes on textured grey backgrounds, 128x128 H.264 at
8 fps. v2 adds long videos (16-512 frames), questions whose evidence is a few frames of hundreds
(needle, after, order_far) or the whole video (count_long), multi-turn sessions whose later turns
refer to earlier answers (multiturn), and a free-form description with a fixed grammar (describe).

Every item is a pure function of (GENERATOR_VERSION=2, split seed, item index) and, only when
given, --max-frames (a test/debug option). v1 (synthvid.py) is imported for its background,
shape drawing and mp4 writer and is left unchanged.

Usage:
  synthvid2.py --split test --count 100 --out .data/synthvid2            # videos/ + test.jsonl
  synthvid2.py --split test --count 100 --out .data/synthvid2 --verify M  # check files vs M
Runs with Debian 12's python3 and python3-numpy, python3-av, python3-pil (no torch).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys

import numpy as np
from PIL import Image, ImageDraw

# v1 lives next to this file; import it rather than copy it so both render identical shapes.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import synthvid as v1  # noqa: E402

GENERATOR = "synthvid2"
GENERATOR_VERSION = 2

CANVAS = v1.CANVAS
FPS = v1.FPS
COLORS = v1.COLORS
SHAPES = v1.SHAPES
DIRECTIONS = v1.DIRECTIONS
# Same split names as v1; the seeds differ from v1's so no v2 item reuses a v1 random stream
# (the version is also part of the seed sequence, this only makes it obvious).
SPLIT_SEEDS = {"train": 1201, "val": 2202, "test": 3203}

# Task of item i is TASKS[i % len(TASKS)], so every prefix of a split is balanced over tasks.
TASKS = ["needle", "after", "order_far", "count_long", "multiturn", "describe"]

# Frame counts per task. The tiny model gets 4 visual tokens per frame (2x2 pooled grid) plus one
# newline per video, so 512 frames are 2049 visual tokens and 256 frames 1025. Bucket of item i
# is TASK_LENGTHS[task][(i // len(TASKS)) % len(...)]: every prefix is also balanced over lengths.
LENGTH_BUCKETS = [16, 64, 128, 256, 512]
TASK_LENGTHS = {
    "needle": [64, 128, 256, 512],
    "after": [64, 128, 256, 512],
    "order_far": [64, 128, 256, 512],
    "count_long": [64, 128, 256, 512],
    "multiturn": [16, 64, 128, 256, 512],
    "describe": [16, 64, 128, 256],
}

QUESTION = {
    "needle": "A {shape} appears briefly. What color is it?",
    "after_shape": "What shape appears right after the {color} {shape}?",
    "after_color": "What color is the object that appears right after the {color} {shape}?",
    "order_far": "Which appears first, the {color_a} {shape_a} or the {color_b} {shape_b}?",
    "count_long": "How many times does the {color} {shape} appear?",
    # multiturn: turn 1 names the object by its onset, later turns say "it".
    "first_shape": "Which shape appears first?",
    "first_color": "What color is the first object to appear?",
    "color": "And what color was it?",
    "shape": "And what shape was it?",
    "count": "How many times does it appear?",
    "direction": "Which way does it move?",
    "after": "Which shape appears right after it first appears?",
    "describe": "Describe the video.",
}

# describe grammar: one clause per object, in order of first appearance, each ending with '.':
#   clause := ("a" | "an") COLOR SHAPE MOTION
#   MOTION := "moves" ("left" | "right" | "up" | "down") | "stays" "still"
MOTIONS = DIRECTIONS + ["still"]


def motion_words(motion: str) -> str:
    return "stays still" if motion == "still" else f"moves {motion}"


# --------------------------------------------------------------------------------------------
# Scene model. An object has a fixed (colour, shape, radius) and a per-frame track of centres
# (None = not visible). Its appearances are the maximal runs of visible frames; the onset of an
# appearance is its first frame. All questions are phrased in terms of these.


class Obj:
    def __init__(self, color: str, shape: str, radius: float, num_frames: int):
        self.color = color
        self.shape = shape
        self.radius = radius
        self.track: list = [None] * num_frames
        # Motion word per appearance ("still" or a direction), in appearance order.
        self.motions: list = []

    def place(self, t0: int, positions: list, motion: str):
        """Adds one appearance starting at frame t0 (positions: one centre per frame)."""
        for k, p in enumerate(positions):
            assert self.track[t0 + k] is None, "appearances must not overlap"
            self.track[t0 + k] = p
        self.motions.append(motion)


def appearances(track) -> list:
    """[start, end) of each maximal run of visible frames."""
    out, start = [], None
    for t, p in enumerate(track):
        if p is not None and start is None:
            start = t
        elif p is None and start is not None:
            out.append([start, t])
            start = None
    if start is not None:
        out.append([start, len(track)])
    return out


def rand_pos(rng, r):
    return v1.rand_pos(rng, r)


def far_pos(rng, r, others, min_dist=30.0):
    """A position at least min_dist from the given centres when one is found (else the farthest)."""
    return v1.far_from(rng, r, others, min_dist)


def move_positions(rng, r, dur: int, motion: str, others=()):
    """Centres for one appearance of dur frames: still, or hold / straight move / hold.

    A move covers >= 30 px along one axis only (the other coordinate is constant), so its
    direction is unambiguous from the first and last frames of the appearance.
    """
    if motion == "still" or dur < 2:
        return [far_pos(rng, r, others)] * dur
    lo, hi = r + 4, CANVAS - r - 4
    sign = 1.0 if motion in ("right", "down") else -1.0
    horizontal = motion in ("left", "right")
    # Try a few paths and keep the first that passes >= 30 px from the given centres (else the
    # one that passes farthest), so a moving object rarely covers one already on screen.
    best, best_d = None, -1.0
    for _ in range(20):
        dist = float(rng.uniform(30, min(70, hi - lo)))
        along0 = float(rng.uniform(lo, hi - dist))
        cross = float(rng.uniform(lo, hi))
        path = [along0 + dist * j / 4 for j in range(5)]
        pts = [(a, cross) if horizontal else (cross, a) for a in path]
        d = min([math.hypot(p[0] - q[0], p[1] - q[1]) for p in pts for q in others] or [1e9])
        if d > best_d:
            best, best_d = (dist, along0, cross), d
        if d >= 30:
            break
    dist, along0, cross = best
    a_start = along0 if sign > 0 else along0 + dist
    # The move takes at least half the appearance (and >= 1 frame of travel), so it is seen.
    move_len = int(rng.integers(max(1, dur // 2), dur))  # frames of travel, 1..dur-1
    start = int(rng.integers(0, dur - move_len))  # frames held before the move
    out = []
    for t in range(dur):
        k = min(max(t - start, 0), move_len)
        a = a_start + sign * dist * k / move_len
        out.append((a, cross) if horizontal else (cross, a))
    return out


def pick_pairs(rng, n: int, exclude=()):
    """n distinct (colour, shape) pairs not in exclude, in random order."""
    all_pairs = [(c, s) for c in COLORS for s in SHAPES if (c, s) not in set(exclude)]
    idx = rng.permutation(len(all_pairs))[:n]
    return [all_pairs[int(i)] for i in idx]


def new_obj(rng, color, shape, F):
    return Obj(color, shape, float(rng.uniform(11, 15)), F)


def persistent(rng, objs_pairs, F, moving_prob=0.3):
    """Distractors visible in every frame (one appearance, onset 0), wandering with long holds."""
    out = []
    for c, s in objs_pairs:
        o = new_obj(rng, c, s, F)
        o.track = v1.wander_track(rng, o.radius, F, moving_prob=moving_prob)
        o.motions = ["wander"]
        out.append(o)
    return out


def spaced_onsets(rng, n: int, lo: int, hi: int, gap: int) -> list:
    """n sorted integers in [lo, hi] with consecutive differences >= gap (hi-lo >= (n-1)*gap)."""
    span = hi - lo - (n - 1) * gap
    assert span >= 0, (n, lo, hi, gap)
    xs = np.sort(rng.integers(0, span + 1, size=n))
    return [lo + int(x) + i * gap for i, x in enumerate(xs)]


def centres_at(objs, t0, t1):
    """Centres of objects visible anywhere in [t0, t1) (first and last frame of each), to keep
    newly placed objects apart from them."""
    pts = []
    for o in objs:
        vis = [p for p in o.track[t0:t1] if p is not None]
        if vis:
            pts += [vis[0], vis[-1]]
    return pts


# --------------------------------------------------------------------------------------------
# Tasks. Each returns (objs, turns, meta); objs are drawn in list order (later on top), and every
# object the question is about is drawn after the persistent distractors so it is never hidden.


def turn(question, answer, kind):
    return {"question": question, "answer": answer, "kind": kind}


def task_needle(rng, F):
    n = int(rng.integers(2, 5))  # 1-3 distractors + the needle; shapes and colours all distinct
    shapes = [str(s) for s in rng.permutation(SHAPES)[:n]]
    colors = [str(c) for c in rng.permutation(list(COLORS))[:n]]
    objs = persistent(rng, list(zip(colors[:-1], shapes[:-1])), F)
    needle = new_obj(rng, colors[-1], shapes[-1], F)
    dur = int(rng.integers(2, 4))
    t0 = int(rng.integers(1, F - dur))
    needle.place(t0, [far_pos(rng, needle.radius, centres_at(objs, t0, t0 + dur))] * dur, "still")
    objs.append(needle)
    q = QUESTION["needle"].format(shape=needle.shape)
    return objs, [turn(q, needle.color, "needle")], {"needle": [t0, t0 + dur]}


def brief_events(rng, F, pairs, lo, gap, max_dur):
    """One short appearance per pair, onsets spaced >= gap apart in [lo, F - max_dur], each
    ending before the next onset. Returns the objects in onset order."""
    n = len(pairs)
    onsets = spaced_onsets(rng, n, lo, F - max_dur, gap)
    objs = []
    for (c, s), t0 in zip(pairs, onsets):
        o = new_obj(rng, c, s, F)
        dur = int(rng.integers(2, max_dur + 1))
        objs.append((o, t0, dur))
    # Cut each event so it ends before the next onset: onsets then order the events cleanly.
    out = []
    for k, (o, t0, dur) in enumerate(objs):
        end = min(t0 + dur, onsets[k + 1] if k + 1 < n else F)
        out.append((o, t0, max(1, end - t0)))
    return out


def task_after(rng, F):
    # Evidence: a sequence of 3-6 brief events spread over the video; the question names one and
    # asks about the next onset. Persistent distractors have onset 0, before every event.
    max_dur = max(3, min(12, F // 32))
    room = F - max_dur - 1  # onsets lie in [1, F - max_dur]
    k = int(rng.integers(3, 7))
    k = min(k, 1 + room // 2)  # only short --max-frames videos need this
    nd = int(rng.integers(0, 3))
    pairs = pick_pairs(rng, k + nd)
    objs = persistent(rng, pairs[k:], F)
    # Spread the events over the video (gap ~ F/2k) so the evidence is a few frames of many.
    gap = max(2, min(F // (2 * k), room // (k - 1)))
    events = brief_events(rng, F, pairs[:k], 1, gap, max_dur)
    for o, t0, dur in events:
        motion = str(rng.choice(MOTIONS)) if dur >= 3 else "still"
        o.place(t0, move_positions(rng, o.radius, dur, motion, centres_at(objs, t0, t0 + dur)),
                motion)
        objs.append(o)
    i = int(rng.integers(0, k - 1))  # the target is not the last event
    tgt, nxt = events[i][0], events[i + 1][0]
    if rng.random() < 0.5:
        t = turn(QUESTION["after_shape"].format(color=tgt.color, shape=tgt.shape), nxt.shape,
                 "after")
    else:
        t = turn(QUESTION["after_color"].format(color=tgt.color, shape=tgt.shape), nxt.color,
                 "after")
    meta = {"events": [[o.color, o.shape, t0, t0 + d] for o, t0, d in events], "target": i}
    return objs, [t], meta


def task_order_far(rng, F):
    # Two brief events at least F/3 apart, 0-3 brief distractor events, 0-2 persistent ones.
    nt = int(rng.integers(0, 4))
    nd = int(rng.integers(0, 3))
    # a and b differ in shape (the answer is a shape); the rest are any other pairs.
    perm = pick_pairs(rng, 24)
    a_pair = perm[0]
    b_pair = next(p for p in perm[1:] if p[1] != a_pair[1])
    pairs = [a_pair, b_pair] + [p for p in perm[1:] if p != b_pair][:nt + nd]
    objs = persistent(rng, pairs[2 + nt:], F)
    max_dur = max(3, min(8, F // 32))
    min_sep = max(2, F // 3)
    ta = int(rng.integers(0, F - min_sep - max_dur))
    tb = int(rng.integers(ta + min_sep, F - max_dur + 1))
    a, b = new_obj(rng, *a_pair, F), new_obj(rng, *b_pair, F)
    for o, t0 in ((a, ta), (b, tb)):
        dur = int(rng.integers(2, max_dur + 1))
        o.place(t0, [far_pos(rng, o.radius, centres_at(objs, t0, t0 + dur))] * dur, "still")
    # Distractor events anywhere else (they may overlap a and b in time, not in onset).
    taken = {ta, tb}
    for c, s in pairs[2:2 + nt]:
        o = new_obj(rng, c, s, F)
        dur = int(rng.integers(2, max_dur + 1))
        t0 = int(rng.integers(0, F - dur + 1))
        if t0 in taken:
            continue  # distinct onsets keep "first" well defined for any pair
        taken.add(t0)
        o.place(t0, [far_pos(rng, o.radius, centres_at(objs + [a, b], t0, t0 + dur))] * dur,
                "still")
        objs.append(o)
    objs += [a, b]
    pair = [a, b] if rng.random() < 0.5 else [b, a]
    q = QUESTION["order_far"].format(color_a=pair[0].color, shape_a=pair[0].shape,
                                     color_b=pair[1].color, shape_b=pair[1].shape)
    return objs, [turn(q, a.shape, "order_far")], {"first": appearances(a.track)[0],
                                                   "second": appearances(b.track)[0]}


def spread_appearances(rng, F, k, min_dur, max_dur):
    """k appearances spread over the whole video: one per equal slot, gaps >= 2 frames."""
    out = []
    for j in range(k):
        lo, hi = (j * F) // k, ((j + 1) * F) // k
        L = hi - lo
        dur = int(rng.integers(min_dur, max(min_dur, min(max_dur, L - 2)) + 1))
        # Start >= lo+1 and end <= hi-1, so neighbouring appearances are >= 2 frames apart.
        s = int(rng.integers(lo + 1, max(lo + 1, hi - 1 - dur) + 1))
        out.append((s, dur))
    return out


def task_count_long(rng, F):
    kmax = min(6, (F - 2) // 4)
    k = int(rng.integers(1, kmax + 1))
    nt = int(rng.integers(0, 3))  # other objects that come and go (1-3 times each)
    nd = int(rng.integers(0, 3))
    pairs = pick_pairs(rng, 1 + nt + nd)
    objs = persistent(rng, pairs[1 + nt:], F)
    max_dur = max(2, min(24, F // 16))
    tgt = new_obj(rng, *pairs[0], F)
    for s, dur in spread_appearances(rng, F, k, 2, max_dur):
        # A new place each time, so each appearance is a separate event on screen too.
        tgt.place(s, [far_pos(rng, tgt.radius, centres_at(objs, s, s + dur))] * dur, "still")
    for c, sh in pairs[1:1 + nt]:
        o = new_obj(rng, c, sh, F)
        for s, dur in spread_appearances(rng, F, int(rng.integers(1, 4)), 2, max_dur):
            o.place(s, [far_pos(rng, o.radius, centres_at(objs + [tgt], s, s + dur))] * dur,
                    "still")
        objs.append(o)
    objs.append(tgt)
    q = QUESTION["count_long"].format(color=tgt.color, shape=tgt.shape)
    return objs, [turn(q, str(k), "count_long")], {"appearances": appearances(tgt.track)}


def task_multiturn(rng, F):
    """Turn 1 names the first object to appear (by shape or colour); later turns ask about "it".

    Target T: first onset of the video (unique), 1-4 appearances spread over the video, all with
    the same motion. Others: 1-3 objects with one appearance each; the first of them has the next
    onset after T's first one (so "right after it" is that object), and no other shares T's shape
    or colour (so the turn-1 answer picks T out unambiguously).
    """
    min_dur = 3
    kmax = max(1, min(4, (F - 2) // (min_dur + 2)))
    k = int(rng.integers(1, kmax + 1))
    n_other = int(rng.integers(1, 4))
    t_color, t_shape = pick_pairs(rng, 1)[0]
    others = [p for p in pick_pairs(rng, 24) if p[0] != t_color and p[1] != t_shape]
    # Others' shapes: distinct from T's; may repeat among themselves (only T is asked about).
    others = others[:n_other]
    T = new_obj(rng, t_color, t_shape, F)
    t_motion = str(rng.choice(MOTIONS))
    max_dur = max(min_dur, min(24, F // 16))
    apps = spread_appearances(rng, F, k, min_dur, max_dur)
    for s, dur in apps:
        T.place(s, move_positions(rng, T.radius, dur, t_motion), t_motion)
    t0 = apps[0][0]
    second = apps[1][0] if k > 1 else F
    # First other object: onset strictly between T's first onset and T's second onset.
    objs_other = []
    taken = {s for s, _ in apps}
    o1_on = int(rng.integers(t0 + 1, max(t0 + 2, min(second, F - 2))))
    onsets = [o1_on]
    taken.add(o1_on)
    for _ in range(n_other - 1):
        cand = int(rng.integers(o1_on + 1, max(o1_on + 2, F - 2)))
        if cand in taken:
            continue  # drop this object rather than tie an onset
        taken.add(cand)
        onsets.append(cand)
    for (c, s), on in zip(others, onsets):
        o = new_obj(rng, c, s, F)
        dur = int(rng.integers(min(2, F - on), max(2, min(F - on, F // 4)) + 1))
        motion = str(rng.choice(MOTIONS)) if dur >= 3 else "still"
        o.place(on, move_positions(rng, o.radius, dur, motion, centres_at([T], on, on + dur)),
                motion)
        objs_other.append(o)
    nxt = objs_other[0]
    # Turn 1, then 1-3 follow-ups in random order from those that apply.
    if rng.random() < 0.5:
        first = turn(QUESTION["first_shape"], T.shape, "first_shape")
        follow = [turn(QUESTION["color"], T.color, "color")]
    else:
        first = turn(QUESTION["first_color"], T.color, "first_color")
        follow = [turn(QUESTION["shape"], T.shape, "shape")]
    follow.append(turn(QUESTION["count"], str(k), "count"))
    follow.append(turn(QUESTION["after"], nxt.shape, "after"))
    if t_motion != "still":
        follow.append(turn(QUESTION["direction"], t_motion, "direction"))
    n_follow = int(rng.integers(1, 4))
    order = rng.permutation(len(follow))[:n_follow]
    turns = [first] + [follow[int(i)] for i in order]
    # T is drawn last (on top), so its appearances are never hidden.
    return objs_other + [T], turns, {"target": [T.color, T.shape], "motion": t_motion,
                                     "appearances": appearances(T.track)}


def task_describe(rng, F):
    """4-7 objects (distinct colour+shape), one appearance each, distinct onsets >= 2 frames
    apart; each stays still or moves one way. Answer: one clause per object in onset order."""
    n = int(rng.integers(4, 8 if F >= 64 else 6))
    pairs = pick_pairs(rng, n)
    min_vis = max(3, F // 8)
    gap = max(2, min(F // 16, (F - min_vis) // n))
    onsets = spaced_onsets(rng, n, 0, F - min_vis, gap)
    objs, facts, clauses = [], [], []
    for i, ((c, s), on) in enumerate(zip(pairs, onsets)):
        o = new_obj(rng, c, s, F)
        end = int(rng.integers(on + min_vis, F + 1))
        motion = str(rng.choice(MOTIONS))
        o.place(on, move_positions(rng, o.radius, end - on, motion, centres_at(objs, on, end)),
                motion)
        objs.append(o)
        facts.append({"order": i + 1, "color": c, "shape": s, "motion": motion})
        clauses.append(f"a {c} {s} {motion_words(motion)}.")
    return objs, [turn(QUESTION["describe"], " ".join(clauses), "describe")], {"facts": facts}


TASK_FNS = {"needle": task_needle, "after": task_after, "order_far": task_order_far,
            "count_long": task_count_long, "multiturn": task_multiturn,
            "describe": task_describe}


# --------------------------------------------------------------------------------------------
# describe scoring (the C++ evaluator reimplements exactly this)


def parse_describe(text: str) -> list:
    """Clauses of a description as (colour, shape, motion) tuples; None for a malformed clause.

    Rule: lowercase; split on '.'; drop pieces that are empty after whitespace split; a piece is
    well formed iff its tokens are exactly [a|an, COLOR, SHAPE, moves, DIRECTION] or
    [a|an, COLOR, SHAPE, stays, still].
    """
    out = []
    for piece in text.lower().split("."):
        tok = piece.split()
        if not tok:
            continue
        ok = (len(tok) == 5 and tok[0] in ("a", "an") and tok[1] in COLORS and tok[2] in SHAPES
              and ((tok[3] == "moves" and tok[4] in DIRECTIONS)
                   or (tok[3] == "stays" and tok[4] == "still")))
        out.append((tok[1], tok[2], tok[4]) if ok else None)
    return out


def score_describe(answer_text: str, facts: list) -> tuple:
    """(precision, recall, f1) of a description against the item's facts.

    A fact is one object's (colour, shape, motion); facts are ordered by onset ("order"). The
    number of matched facts m is the length of the longest common subsequence of the answer's
    clauses (parse_describe; a malformed clause matches nothing) and the facts in order, so a
    missing or extra clause costs one fact and a wrong order costs the clauses out of order.
    precision = m / clauses, recall = m / facts, f1 = 2pr / (p + r); each 0 when undefined.
    """
    pred = parse_describe(answer_text)
    truth = [(f["color"], f["shape"], f["motion"]) for f in sorted(facts, key=lambda f: f["order"])]
    # Classic O(len(pred) * len(truth)) LCS table.
    lcs = [[0] * (len(truth) + 1) for _ in range(len(pred) + 1)]
    for i, p in enumerate(pred):
        for j, t in enumerate(truth):
            lcs[i + 1][j + 1] = (lcs[i][j] + 1 if p is not None and p == t
                                 else max(lcs[i][j + 1], lcs[i + 1][j]))
    m = lcs[len(pred)][len(truth)]
    p = m / len(pred) if pred else 0.0
    r = m / len(truth) if truth else 0.0
    f1 = 2 * p * r / (p + r) if p + r > 0 else 0.0
    return p, r, f1


# --------------------------------------------------------------------------------------------
# Rendering. Static backgrounds (no temporal noise) and integer-pixel object positions, so
# frames in still stretches are identical: they are rendered once and cost x264 almost nothing.


def sprite(shape: str, r: float):
    """Boolean mask of a shape centred at (c, c) in a (2c+1)^2 patch, c = ceil(r) + 1."""
    c = int(np.ceil(r)) + 1
    img = Image.new("L", (2 * c + 1, 2 * c + 1), 0)
    v1.draw_shape(ImageDraw.Draw(img), shape, c, c, r, 255)
    return np.asarray(img) > 0, c


def render(rng, objs, F: int) -> np.ndarray:
    bg = v1.make_background(rng, CANVAS)
    sprites = [sprite(o.shape, o.radius) for o in objs]
    colors = [np.array(COLORS[o.color], np.uint8) for o in objs]
    frames = np.empty((F, CANVAS, CANVAS, 3), np.uint8)
    cache = {}
    for t in range(F):
        key = tuple((i, int(round(o.track[t][0])), int(round(o.track[t][1])))
                    for i, o in enumerate(objs) if o.track[t] is not None)
        img = cache.get(key)
        if img is None:
            img = bg.copy()
            for i, x, y in key:
                mask, c = sprites[i]
                # Clip the patch to the canvas (positions keep shapes inside; this is a guard).
                x0, y0 = x - c, y - c
                xs0, ys0 = max(0, -x0), max(0, -y0)
                xs1 = min(mask.shape[1], CANVAS - x0)
                ys1 = min(mask.shape[0], CANVAS - y0)
                m = mask[ys0:ys1, xs0:xs1]
                region = img[y0 + ys0:y0 + ys1, x0 + xs0:x0 + xs1]
                region[m] = colors[i]
            cache[key] = img
        frames[t] = img
    return frames


# --------------------------------------------------------------------------------------------
# Items


def item_rng(split_seed: int, index: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([GENERATOR_VERSION, split_seed, index]))


def item_task_and_bucket(index: int):
    task = TASKS[index % len(TASKS)]
    lens = TASK_LENGTHS[task]
    return task, lens[(index // len(TASKS)) % len(lens)]


def make_scene(split: str, index: int, seed: int | None = None, max_frames: int | None = None):
    """(rng, task, F, objs, turns, meta) before rendering; rng continues into render()."""
    split_seed = SPLIT_SEEDS[split] if seed is None else seed
    rng = item_rng(split_seed, index)
    task, F = item_task_and_bucket(index)
    if max_frames:
        F = min(F, max_frames)
    objs, turns, meta = TASK_FNS[task](rng, F)
    return rng, task, F, objs, turns, meta


def item_id(split: str, index: int) -> str:
    # "v2-" keeps ids and video names apart from v1's (test-000000) if both share a folder.
    return f"v2-{split}-{index:06d}"


def make_item(split, index, seed=None, max_frames=None, render_frames=True):
    """(record, frames[F, 128, 128, 3] uint8 or None)."""
    rng, task, F, objs, turns, meta = make_scene(split, index, seed, max_frames)
    frames = render(rng, objs, F) if render_frames else None
    vid = item_id(split, index)
    rec = {
        "id": vid,
        "suite": GENERATOR,
        "generator_version": GENERATOR_VERSION,
        "task": task,
        "video": f"videos/{vid}.mp4",
        "num_frames": F,
        "fps": FPS,
        "length_bucket": F,
        "turns": turns,
    }
    if task == "describe":
        rec["facts"] = meta["facts"]
    rec["objects"] = [{"color": o.color, "shape": o.shape, "appearances": appearances(o.track),
                       "motions": o.motions} for o in objs]
    rec["meta"] = {k: v for k, v in meta.items() if k != "facts"}
    return rec, frames


def _gen_one(job):
    """Worker: the record of item i, writing its mp4 unless it exists (resumable)."""
    split, i, seed, max_frames, out = job
    rec, _ = make_item(split, i, seed, max_frames, render_frames=False)
    vpath = os.path.join(out, rec["video"])
    if not os.path.exists(vpath):
        rec, frames = make_item(split, i, seed, max_frames)
        v1.write_mp4(vpath, frames)
    return rec


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_manifest(out: str, split: str, recs: list, args, argv):
    import av  # noqa: PLC0415
    import PIL  # noqa: PLC0415

    files = {r["video"]: sha256_file(os.path.join(out, r["video"])) for r in recs}
    files[f"{split}.jsonl"] = sha256_file(os.path.join(out, f"{split}.jsonl"))
    man = {
        "generator": GENERATOR,
        "generator_version": GENERATOR_VERSION,
        "split": split,
        "split_seed": SPLIT_SEEDS[split] if args.seed is None else args.seed,
        "start": args.start,
        "count": args.count,
        "max_frames": args.max_frames,
        "items": len(recs),
        "tasks": {t: sum(1 for r in recs if r["task"] == t) for t in TASKS},
        "command": " ".join(["synthvid2.py"] + list(argv)),
        "versions": {
            "python": sys.version.split()[0],
            "numpy": np.__version__,
            "av": av.__version__,
            "pillow": PIL.__version__,
            "libavcodec": ".".join(str(x) for x in av.library_versions["libavcodec"]),
        },
        "files": dict(sorted(files.items())),
    }
    path = os.path.join(out, f"{split}.manifest.json")
    with open(path, "w") as f:
        json.dump(man, f, indent=1)
        f.write("\n")
    return path


def verify(out: str, manifest_path: str) -> int:
    """Compares every file the manifest lists with the one under out; 0 when all are equal."""
    with open(manifest_path) as f:
        man = json.load(f)
    missing, differ, same = [], [], 0
    for rel, h in man["files"].items():
        p = os.path.join(out, rel)
        if not os.path.exists(p):
            missing.append(rel)
        elif sha256_file(p) != h:
            differ.append(rel)
        else:
            same += 1
    print(f"verify: {len(man['files'])} files in manifest: {same} equal, {len(differ)} differ, "
          f"{len(missing)} missing", file=sys.stderr)
    for rel in (differ + missing)[:20]:
        print(f"  {'differs' if rel in differ else 'missing'}: {rel}", file=sys.stderr)
    if any(r.endswith(".jsonl") for r in differ):
        print("  the JSONL differs: questions/answers changed (generator or numpy)", file=sys.stderr)
    elif differ:
        print("  only mp4 bytes differ: likely another libx264/FFmpeg build (manifest: "
              f"{man.get('versions')})", file=sys.stderr)
    return 0 if not differ and not missing else 1


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--split", required=True, choices=list(SPLIT_SEEDS))
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--start", type=int, default=0, help="first item index")
    ap.add_argument("--out", required=True, help="output folder (videos/, <split>.jsonl, "
                                                  "<split>.manifest.json)")
    ap.add_argument("--seed", type=int, default=None, help="override the split seed")
    ap.add_argument("--shard", default="0/1", help="k/n: generate indices with i %% n == k")
    ap.add_argument("--merge", type=int, default=0,
                    help="merge the N shard JSONLs of this split into <split>.jsonl, write the "
                         "manifest and exit")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (output is the same)")
    ap.add_argument("--max-frames", type=int, default=None,
                    help="cap every video at this many frames (tests; changes the items)")
    ap.add_argument("--verify", default=None, metavar="MANIFEST",
                    help="check the files under --out against this manifest and exit")
    args = ap.parse_args(argv)

    if args.verify:
        sys.exit(verify(args.out, args.verify))

    jsonl = os.path.join(args.out, f"{args.split}.jsonl")
    if args.merge:
        recs = []
        for k in range(args.merge):
            with open(f"{jsonl}.{k}of{args.merge}") as f:
                recs += [json.loads(line) for line in f]
        recs.sort(key=lambda r: r["id"])
        with open(jsonl, "w") as f:
            for r in recs:
                f.write(json.dumps(r) + "\n")
        path = write_manifest(args.out, args.split, recs, args, argv)
        print(f"merged {len(recs)} records; wrote {path}", file=sys.stderr)
        return

    k, n = (int(x) for x in args.shard.split("/"))
    os.makedirs(os.path.join(args.out, "videos"), exist_ok=True)
    jobs = [(args.split, i, args.seed, args.max_frames, args.out)
            for i in range(args.start, args.start + args.count) if i % n == k]
    if args.jobs > 1:
        import multiprocessing  # noqa: PLC0415
        with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
            recs = pool.map(_gen_one, jobs, chunksize=1)
    else:
        recs = []
        for j, job in enumerate(jobs):
            recs.append(_gen_one(job))
            if j % 100 == 0:
                print(f"{args.split}: {j}/{len(jobs)}", file=sys.stderr, flush=True)
    path = jsonl if n == 1 else f"{jsonl}.{k}of{n}"
    with open(path, "w") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")
    if n == 1:
        man = write_manifest(args.out, args.split, recs, args, argv)
        print(f"wrote {path} and {man}", file=sys.stderr)
    else:
        print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
