#!/usr/bin/env python3
"""Tests of tools/synthvid/synthvid2.py (the synthvid v2 generator).

Run: /usr/bin/python3 tests/tools/test_synthvid2.py  (Debian: python3-numpy python3-av python3-pil)
Prints one line per check and "N passed, M failed"; exits 1 on a failure, 0 with "SKIPPED: ..."
when numpy, PyAV or Pillow is missing. About 10-20 s.

Answers are recomputed here from the generator's scene (the per-frame tracks of every object),
with this file's own reading of the question text, not from the generator's answer code.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GEN = os.path.join(ROOT, "tools", "synthvid", "synthvid2.py")

try:
    import av  # noqa: F401
    import numpy as np  # noqa: F401
    import PIL  # noqa: F401
except ImportError as e:
    print(f"SKIPPED: {e} (apt-get install python3-numpy python3-av python3-pil)")
    sys.exit(0)

sys.path.insert(0, os.path.dirname(GEN))
import synthvid2 as s2  # noqa: E402

COUNT = 14  # items 0..13: every task at least twice
MAX_FRAMES = 64
results = []


def check(name, ok, detail=""):
    results.append(bool(ok))
    print(f"{'ok  ' if ok else 'FAIL'} {name}" + ("" if ok or not detail else f": {detail}"),
          flush=True)


def generate(out, *extra):
    cmd = [sys.executable, GEN, "--split", "test", "--count", str(COUNT), "--out", out,
           "--max-frames", str(MAX_FRAMES), *extra]
    return subprocess.run(cmd, capture_output=True, text=True)


def read(path, mode="rb"):
    with open(path, mode) as f:
        return f.read()


# ------------------------------------------------------------------------------------------
# Independent recomputation of answers from tracks


def apps(track):
    out, start = [], None
    for t, p in enumerate(list(track) + [None]):
        if p is not None and start is None:
            start = t
        if p is None and start is not None:
            out.append((start, t))
            start = None
    return out


def motion_of(track, a):
    pts = [track[t] for t in range(*a)]
    if all(p == pts[0] for p in pts):
        return "still"
    dx, dy = pts[-1][0] - pts[0][0], pts[-1][1] - pts[0][1]
    if abs(dy) < 1e-9 and abs(dx) >= 20:
        return "right" if dx > 0 else "left"
    if abs(dx) < 1e-9 and abs(dy) >= 20:
        return "down" if dy > 0 else "up"
    return "unclear"


def find(objs, color=None, shape=None):
    return [o for o in objs if (color is None or o.color == color)
            and (shape is None or o.shape == shape)]


def onset_list(objs):
    """(onset, object) for every appearance of every object, by onset."""
    return sorted(((a[0], id(o), o) for o in objs for a in apps(o.track)), key=lambda x: x[0])


def expected_turns(task, F, objs, turns):
    """Recomputed answers per turn; raises AssertionError when the scene is ambiguous."""
    C, S = "|".join(s2.COLORS), "|".join(s2.SHAPES)
    q0 = turns[0]["question"]
    if task == "needle":
        shape = re.fullmatch(rf"A ({S}) appears briefly\. What color is it\?", q0).group(1)
        (o,) = find(objs, shape=shape)
        assert 2 <= sum(p is not None for p in o.track) <= 3, "needle shows 2-3 frames"
        return [o.color]
    if task == "after":
        m = re.fullmatch(rf"What (shape appears|color is the object that appears) right after "
                         rf"the ({C}) ({S})\?", q0)
        (o,) = find(objs, m.group(2), m.group(3))
        (a,) = apps(o.track)
        later = [x for x in onset_list(objs) if x[0] > a[0]]
        assert len(later) == 1 or later[0][0] < later[1][0], "next onset is unique"
        nxt = later[0][2]
        return [nxt.shape if m.group(1).startswith("shape") else nxt.color]
    if task == "order_far":
        m = re.fullmatch(rf"Which appears first, the ({C}) ({S}) or the ({C}) ({S})\?", q0)
        (x,) = find(objs, m.group(1), m.group(2))
        (y,) = find(objs, m.group(3), m.group(4))
        (ax,), (ay,) = apps(x.track), apps(y.track)
        assert x.shape != y.shape and abs(ax[0] - ay[0]) >= max(2, F // 3), "far apart"
        return [x.shape if ax[0] < ay[0] else y.shape]
    if task == "count_long":
        m = re.fullmatch(rf"How many times does the ({C}) ({S}) appear\?", q0)
        (o,) = find(objs, m.group(1), m.group(2))
        n = len(apps(o.track))
        assert 1 <= n <= 6
        return [str(n)]
    if task == "multiturn":
        ons = onset_list(objs)
        assert ons[0][0] < ons[1][0], "first onset is unique"
        T = ons[0][2]
        ta = apps(T.track)
        nxt = [x for x in ons if x[0] > ta[0][0]][0]
        assert nxt[2] is not T, "what follows T's first appearance is another object"
        mot = {motion_of(T.track, a) for a in ta}
        out = []
        for t in turns:
            k = t["kind"]
            q = {"first_shape": s2.QUESTION["first_shape"], "first_color": s2.QUESTION["first_color"],
                 "color": "And what color was it?", "shape": "And what shape was it?",
                 "count": "How many times does it appear?", "direction": "Which way does it move?",
                 "after": "Which shape appears right after it first appears?"}[k]
            assert t["question"] == q, (t["question"], q)
            if k in ("first_shape", "shape"):
                out.append(T.shape)
            elif k in ("first_color", "color"):
                out.append(T.color)
            elif k == "count":
                out.append(str(len(ta)))
            elif k == "direction":
                assert len(mot) == 1 and mot != {"still"}, mot
                out.append(mot.pop())
            elif k == "after":
                out.append(nxt[2].shape)
        assert turns[0]["kind"] in ("first_shape", "first_color")
        return out
    if task == "describe":
        assert q0 == "Describe the video."
        seq = sorted(objs, key=lambda o: apps(o.track)[0][0])
        ons = [apps(o.track)[0][0] for o in seq]
        assert all(b - a >= 2 for a, b in zip(ons, ons[1:])), "onsets >= 2 frames apart"
        clauses = []
        for o in seq:
            (a,) = apps(o.track)
            m = motion_of(o.track, a)
            assert m != "unclear"
            clauses.append(f"a {o.color} {o.shape} " + ("stays still." if m == "still"
                                                        else f"moves {m}."))
        return [" ".join(clauses)]
    raise AssertionError(f"unknown task {task}")


def consistency(split, index, rec=None, max_frames=None):
    """Returns None when the item's answers match the recomputation, else a reason."""
    _, task, F, objs, turns, meta = s2.make_scene(split, index, max_frames=max_frames)
    try:
        exp = expected_turns(task, F, objs, turns)
    except (AssertionError, AttributeError, ValueError) as e:
        return f"{split}/{index} {task}: {type(e).__name__} {e}"
    got = [t["answer"] for t in turns]
    if got != exp:
        return f"{split}/{index} {task}: answers {got} != recomputed {exp}"
    if rec is not None:
        if rec["turns"] != turns:
            return f"{rec['id']}: JSONL turns differ from the scene's"
        objs_rec = [{"color": o.color, "shape": o.shape,
                     "appearances": [list(a) for a in apps(o.track)]} for o in objs]
        if [{k: o[k] for k in ("color", "shape", "appearances")} for o in rec["objects"]] != objs_rec:
            return f"{rec['id']}: JSONL objects differ from the tracks"
    return None


# ------------------------------------------------------------------------------------------


def main():
    t_start = time.time()
    tmp = tempfile.mkdtemp(prefix="synthvid2-test-")
    try:
        run(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    passed, failed = results.count(True), results.count(False)
    print(f"{passed} passed, {failed} failed ({time.time() - t_start:.1f} s)")
    sys.exit(1 if failed else 0)


def run(tmp):
    a, b = os.path.join(tmp, "a"), os.path.join(tmp, "b")
    t0 = time.time()
    pa = generate(a)
    check("generate (run 1)", pa.returncode == 0, pa.stderr[-2000:])
    dt = time.time() - t0
    pb = generate(b, "--jobs", "2")
    check("generate (run 2, --jobs 2)", pb.returncode == 0, pb.stderr[-2000:])
    if pa.returncode or pb.returncode:
        return
    print(f"     ({COUNT} items, --max-frames {MAX_FRAMES}: {dt:.1f} s)")

    ja, jb = read(os.path.join(a, "test.jsonl")), read(os.path.join(b, "test.jsonl"))
    check("determinism: identical JSONL", ja == jb)
    recs = [json.loads(line) for line in ja.decode().splitlines()]
    vids = [r["video"] for r in recs]
    diff = [v for v in vids if read(os.path.join(a, v)) != read(os.path.join(b, v))]
    check("determinism: identical mp4 bytes", not diff, f"differ: {diff}")

    check("item count and ids", len(recs) == COUNT and
          [r["id"] for r in recs] == [f"v2-test-{i:06d}" for i in range(COUNT)])
    tasks = [r["task"] for r in recs]
    check("every task present, balanced by index",
          tasks == [s2.TASKS[i % len(s2.TASKS)] for i in range(COUNT)]
          and set(tasks) == set(s2.TASKS))
    need = {"id", "suite", "task", "video", "num_frames", "fps", "turns", "length_bucket"}
    bad = [r["id"] for r in recs if not need <= set(r) or r["suite"] != "synthvid2"
           or ("facts" in r) != (r["task"] == "describe")
           or any(set(t) != {"question", "answer", "kind"} for t in r["turns"])]
    check("schema fields", not bad, f"{bad}")

    # Decoding: every frame of the file is a model frame.
    bad = []
    for r in recs:
        with av.open(os.path.join(a, r["video"])) as c:
            frames = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
        if len(frames) != r["num_frames"] or any(f.shape != (128, 128, 3) for f in frames):
            bad.append(f"{r['id']}: {len(frames)} frames of {frames[0].shape}, "
                       f"expected {r['num_frames']}")
    check("mp4 decodes to num_frames frames of 128x128", not bad, "; ".join(bad))

    bad = [x for x in (consistency("test", i, r, MAX_FRAMES) for i, r in enumerate(recs)) if x]
    check("answers match the scene (generated items)", not bad, "; ".join(bad[:5]))

    # Full-length scenes (no --max-frames), no rendering: the real configuration's answers.
    t1 = time.time()
    bad, long_items = [], 0
    for split in ("train", "val", "test"):
        for i in range(120):
            x = consistency(split, i)
            if x:
                bad.append(x)
    for i in range(100):
        _, task, F, *_ = s2.make_scene("test", i)
        long_items += F >= 256
    check(f"answers match the scene (360 full-length scenes, {time.time() - t1:.1f} s)", not bad,
          "; ".join(bad[:5]))
    buckets = {s2.make_scene("test", i)[2] for i in range(100)}
    check("test prefix of 100 has >= 256-frame items (>= 1025 visual tokens) and 512 frames",
          long_items >= 10 and 512 in buckets, f"{long_items} long, buckets {sorted(buckets)}")

    sceneA = s2.make_item("train", 0, render_frames=False)[0]
    sceneB = s2.make_item("val", 0, render_frames=False)[0]
    sceneC = s2.make_item("test", 0, render_frames=False)[0]
    check("splits differ (distinct seeds)",
          len({json.dumps(x["objects"]) + json.dumps(x["turns"]) for x in (sceneA, sceneB, sceneC)})
          == 3)

    mt = [r for r in recs if r["task"] == "multiturn"]
    check("multiturn items have 2-4 turns; others one",
          mt and all(2 <= len(r["turns"]) <= 4 for r in mt)
          and all(len(r["turns"]) == 1 for r in recs if r["task"] != "multiturn"))
    kinds = {t["kind"] for i in range(600) for t in s2.make_scene("test", i)[4]
             if i % len(s2.TASKS) == s2.TASKS.index("multiturn")}
    check("multiturn covers every follow-up kind",
          kinds == {"first_shape", "first_color", "color", "shape", "count", "direction", "after"},
          f"{sorted(kinds)}")

    # describe: length, exact score of the true answer, lower scores for corrupted ones.
    ds = [r for r in recs if r["task"] == "describe"]
    bad = []
    for r in ds:
        ans, facts = r["turns"][0]["answer"], r["facts"]
        n = len(ans.split())
        if not 20 <= n <= 60:
            bad.append(f"{r['id']}: {n} tokens")
        if s2.score_describe(ans, facts) != (1.0, 1.0, 1.0):
            bad.append(f"{r['id']}: true answer scores {s2.score_describe(ans, facts)}")
        clauses = [c.strip() + "." for c in ans.split(".") if c.strip()]
        if len(clauses) != len(facts):
            bad.append(f"{r['id']}: {len(clauses)} clauses for {len(facts)} facts")
        f0 = facts[0]
        other = next(c for c in s2.COLORS if c != f0["color"])
        wrong_color = ans.replace(f"a {f0['color']} {f0['shape']}", f"a {other} {f0['shape']}", 1)
        corrupted = {
            "wrong colour": wrong_color,
            "dropped clause": " ".join(clauses[:-1]),
            "reversed order": " ".join(reversed(clauses)),
            "malformed clause": ans.replace(" moves ", " goes ", 1).replace(" stays ", " is ", 1),
            "empty": "",
        }
        for what, text in corrupted.items():
            p, rr, f1 = s2.score_describe(text, facts)
            if not f1 < 1.0:
                bad.append(f"{r['id']}: {what} scores f1 {f1}")
        p, rr, _ = s2.score_describe(" ".join(clauses[:-1]), facts)
        if p != 1.0 or abs(rr - (len(facts) - 1) / len(facts)) > 1e-12:
            bad.append(f"{r['id']}: dropped clause gives p={p} r={rr}")
        p, rr, _ = s2.score_describe(ans + " a red circle moves up. blah.", facts)
        if abs(p - len(facts) / (len(facts) + 2)) > 1e-12 or rr != 1.0:
            bad.append(f"{r['id']}: extra clauses give p={p} r={rr}")
    check(f"describe: 20-60 tokens, score 1/1/1, corrupted answers lower ({len(ds)} items)",
          ds and not bad, "; ".join(bad[:5]))
    check("score_describe: 'an' and case accepted",
          s2.score_describe("An RED circle stays still.",
                            [{"order": 1, "color": "red", "shape": "circle", "motion": "still"}])
          == (1.0, 1.0, 1.0))

    # Manifest: every file hashed, hashes equal to the files; --verify agrees and catches a change.
    man = json.loads(read(os.path.join(a, "test.manifest.json")))
    files = man.get("files", {})
    bad = [f for f, h in files.items() if s2.sha256_file(os.path.join(a, f)) != h]
    check("manifest lists the JSONL and every mp4",
          set(files) == set(vids) | {"test.jsonl"} and man.get("items") == COUNT
          and man.get("generator") == "synthvid2" and man.get("generator_version") == 2
          and {"python", "numpy", "av", "pillow"} <= set(man.get("versions", {}))
          and "--count" in man.get("command", ""))
    check("manifest hashes match the files", not bad, f"{bad}")
    v = subprocess.run([sys.executable, GEN, "--split", "test", "--count", str(COUNT), "--out", b,
                        "--verify", os.path.join(a, "test.manifest.json")],
                       capture_output=True, text=True)
    check("--verify passes on an identical regeneration", v.returncode == 0, v.stderr)
    with open(os.path.join(b, vids[0]), "ab") as f:
        f.write(b"\0")
    v = subprocess.run([sys.executable, GEN, "--split", "test", "--count", str(COUNT), "--out", b,
                        "--verify", os.path.join(a, "test.manifest.json")],
                       capture_output=True, text=True)
    check("--verify fails when a file changed", v.returncode == 1, v.stderr)

    # Resumable: a rerun leaves existing mp4 untouched and writes the same JSONL.
    before = {v: os.stat(os.path.join(a, v)).st_mtime_ns for v in vids}
    pr = generate(a)
    after = {v: os.stat(os.path.join(a, v)).st_mtime_ns for v in vids}
    check("rerun keeps existing mp4 and the same JSONL",
          pr.returncode == 0 and before == after and read(os.path.join(a, "test.jsonl")) == ja)

    # Shards + merge give the same JSONL as one run.
    c = os.path.join(tmp, "c")
    ok = all(generate(c, "--shard", f"{k}/2").returncode == 0 for k in range(2))
    pm = subprocess.run([sys.executable, GEN, "--split", "test", "--count", str(COUNT), "--out", c,
                         "--max-frames", str(MAX_FRAMES), "--merge", "2"],
                        capture_output=True, text=True)
    check("--shard 0/2, 1/2 + --merge 2 equals one run",
          ok and pm.returncode == 0 and read(os.path.join(c, "test.jsonl")) == ja, pm.stderr[-500:])


if __name__ == "__main__":
    main()
