#!/usr/bin/env python3
"""Tests of tools/train/evidence.py's frame targets (train_v2.py --evidence-weight).

Run: /usr/bin/python3 tests/tools/test_evidence.py  (Debian: python3-numpy python3-av python3-pil,
for the synthvid v2 generator it reads scenes from). Prints one line per check and "N passed, M
failed"; exits 1 on a failure, 0 with "SKIPPED: ..." when a module is missing.

Each turn's evidence frames are checked against the generator's scene (every object's per-frame
track), not against the item's record that evidence.py reads: the frames must show an object that
carries the turn's answer, and a description's k-th clause must point at the frames where its
object first appears.
"""

from __future__ import annotations

import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

try:
    import av  # noqa: F401
    import numpy as np  # noqa: F401
    import PIL  # noqa: F401
except ImportError as e:
    print(f"SKIPPED: {e} (apt-get install python3-numpy python3-av python3-pil)")
    sys.exit(0)

sys.path.insert(0, os.path.join(ROOT, "tools", "synthvid"))
sys.path.insert(0, os.path.join(ROOT, "tools", "train"))
import evidence  # noqa: E402
import synthvid2 as s2  # noqa: E402

ITEMS = 120  # 20 of each task, every length bucket
results = []


def check(name, ok, detail=""):
    results.append(bool(ok))
    if not ok:
        print(f"FAIL {name}: {detail}", flush=True)


def first_onset(obj):
    return next(t for t, p in enumerate(obj.track) if p is not None)


def new_at(objs, t):
    """Objects whose first visible frame is t (what is new on screen there)."""
    return [o for o in objs if any(p is not None for p in o.track) and first_onset(o) == t]


def visible(objs, span):
    return [o for o in objs if all(o.track[t] is not None for t in range(*span))]


def answer_matches(obj, answer):
    return answer in (obj.color, obj.shape)


def check_item(index):
    _, task, F, objs, turns, _ = s2.make_scene("train", index)
    rec, _ = s2.make_item("train", index, render_frames=False)
    name = f"{rec['id']} ({task}, {F} frames)"
    if task == "describe":
        clauses = evidence.clause_evidence(rec)
        facts = sorted(rec["facts"], key=lambda f: f["order"])
        check(f"{name}: one span per clause", len(clauses) == len(facts), (len(clauses), facts))
        for k, (spans, fact) in enumerate(zip(clauses, facts)):
            (s, e), = spans
            shown = [(o.color, o.shape) for o in new_at(objs, s)]
            check(f"{name}: clause {k} points at its object's onset",
                  (fact["color"], fact["shape"]) in shown and 0 < e - s <= 2, (spans, shown, fact))
        return
    for t, turn in enumerate(turns):
        spans = evidence.turn_evidence(rec, t)
        if spans is None:
            check(f"{name} turn {t}: no evidence only for a session's last object", task ==
                  "multiturn" and turn["kind"] == "after", turn)
            continue
        check(f"{name} turn {t}: spans inside the video",
              all(0 <= s < e <= F for s, e in spans), spans)
        answer = turn["answer"]
        if turn["kind"] in ("after", "needle"):
            # The evidence is one appearance; what appears there carries the answer.
            (s, e), = spans
            shown = new_at(objs, s) if turn["kind"] == "after" and task == "multiturn" else [
                o for o in visible(objs, (s, e))
                if o.track[s - 1 if s else 0] is None or s == 0]
            check(f"{name} turn {t}: the evidence shows the answer {answer}",
                  any(answer_matches(o, answer) for o in shown),
                  (spans, [(o.color, o.shape) for o in shown]))
        elif turn["kind"] == "order_far":
            starts = sorted(s for s, _ in spans)
            first = [o for o in visible(objs, (starts[0], starts[0] + 1))
                     if o.track[starts[0] - 1] is None]
            check(f"{name} turn {t}: the earlier span shows the answer {answer}",
                  any(o.shape == answer for o in first), spans)
        elif turn["kind"] == "count_long":
            check(f"{name} turn {t}: one span per counted appearance",
                  len(spans) == int(answer), (spans, answer))
        else:
            # A session's turns about its object: the spans are that object's appearances.
            target = next(o for o in objs if [o.color, o.shape] == rec["meta"]["target"])
            on = [t_ for t_ in range(F) if target.track[t_] is not None]
            check(f"{name} turn {t}: spans cover the session's object",
                  sorted(x for s, e in spans for x in range(s, e)) == on, spans)


def check_token_ranges():
    """Spans from a record are clipped to the video: past its end, negative, reversed or empty
    spans mark nothing outside it."""
    r = evidence.video_token_ranges
    check("a span inside the video", r([[2, 4]], 10, 4) == [(8, 16)], r([[2, 4]], 10, 4))
    check("a span past the end is cut at the last frame", r([[8, 15]], 10, 4) == [(32, 40)],
          r([[8, 15]], 10, 4))
    check("a negative start is cut at frame 0", r([[-3, 1]], 10, 4) == [(0, 4)],
          r([[-3, 1]], 10, 4))
    check("reversed, empty and outside spans mark nothing",
          r([[5, 2], [3, 3], [12, 20], [-9, -1]], 10, 4) == [], r([[5, 2], [12, 20]], 10, 4))
    rec = {"task": "after", "meta": {"events": [["red", "circle", 1, 3]], "target": 0},
           "turns": [{"kind": "after"}]}
    check("an 'after' record whose target is the last event has no evidence",
          evidence.turn_evidence(rec, 0) is None, evidence.turn_evidence(rec, 0))


def main():
    t_start = time.time()
    check_token_ranges()
    for i in range(ITEMS):
        check_item(i)
    passed, failed = results.count(True), results.count(False)
    print(f"{passed} passed, {failed} failed ({time.time() - t_start:.1f} s)")
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
