"""Evidence attention for synthvid v2 fine-tuning (train_v2.py --evidence-weight).

One attention head of one decoder layer is trained, at the positions that write an answer, to put
its attention on the video frames that hold the answer's evidence: the needle's frames, the event
right after the named one, the two events of an order question, every appearance of a counted
object, the object a multi-turn session is about, and for a description the onset of the object
the current clause describes. The loss is -log(attention mass on those frames' tokens), as the v1
recipe's retrieval head (README.md, "Stage 2 auxiliary losses"), but with targets that are a few
frames of a long video: attention is pushed to concentrate on the evidence, the way a pretrained
VLM's does, instead of every token reading every earlier frame.

Targets are frame spans [start, end) from the item's record (synthvid2.py writes `objects`,
`meta`); a frame's tokens are its tokens_per_frame rows of the video block.
"""

from __future__ import annotations

# Frames of a described object's onset that its clause is pointed at: the frames where it is new.
DESCRIBE_ONSET_FRAMES = 2


def _first_onsets(item):
    """[(first onset, object)] of every object, in onset order."""
    return sorted((o["appearances"][0][0], k) for k, o in enumerate(item["objects"])
                  if o["appearances"])


def _object_named(item, color, shape):
    for o in item["objects"]:
        if o["color"] == color and o["shape"] == shape:
            return o
    return None


def turn_evidence(item, turn_index):
    """Frame spans [[start, end), ...] holding the evidence of turn `turn_index` of a v2 item, or
    None when the turn has no single place to look (describe: see clause_evidence)."""
    task, meta = item["task"], item.get("meta", {})
    if task == "needle":
        return [meta["needle"]]
    if task == "after":
        following = meta["target"] + 1
        return [meta["events"][following][2:4]] if following < len(meta["events"]) else None
    if task == "order_far":
        return [meta["first"], meta["second"]]
    if task == "count_long":
        return meta["appearances"]
    if task == "multiturn":
        kind = item["turns"][turn_index]["kind"]
        if kind != "after":
            return meta["appearances"]
        # The object whose first onset comes right after the session object's first onset.
        start = meta["appearances"][0][0]
        later = [(t, k) for t, k in _first_onsets(item) if t > start]
        if not later:
            return None
        return [item["objects"][later[0][1]]["appearances"][0]]
    return None


def clause_evidence(item):
    """describe: per clause (objects in onset order), the onset frames of its object."""
    out = []
    for t, k in _first_onsets(item):
        end = item["objects"][k]["appearances"][0][1]
        out.append([[t, min(end, t + DESCRIBE_ONSET_FRAMES)]])
    return out


def video_token_ranges(spans, num_frames, tokens_per_frame):
    """[start, end) offsets into the video block of the frames in `spans`, each span clipped to
    the video's frames: a record whose span runs past the video (or is reversed) must not mark
    the question's text tokens, which follow the video block, as evidence."""
    out = []
    for s, e in spans:
        s, e = max(0, int(s)), min(num_frames, int(e))
        if s < e:
            out.append((s * tokens_per_frame, e * tokens_per_frame))
    return out


class EvidenceTargets:
    """Per batch: which (row, query position) pairs are supervised, and on which key positions."""

    def __init__(self, tokenizer):
        # A description's clauses end at a token holding '.', so the clause of an answer token is
        # the number of such tokens before it in the same turn.
        vocab = tokenizer.get_vocab()
        self.period_ids = {i for t, i in vocab.items()
                           if "." in tokenizer.convert_tokens_to_string([t])}

    def build(self, batch, ids, labels, turn_of, video_id, tokens_per_frame):
        """batch: [(item, turns)] as collate() took it; the tensors collate() returned.
        Returns (rows, query_positions, key_mask [N, L] bool) or None when nothing applies."""
        import torch
        L = ids.shape[1]
        rows, queries, masks = [], [], []
        for b, (item, _turns) in enumerate(batch):
            if "objects" not in item:  # v1 items: no evidence targets here
                continue
            video_start = int((ids[b] == video_id).nonzero()[0, 0])
            pos = (labels[b, 1:] != -100).nonzero()[:, 0].tolist()  # positions writing a label
            clauses = clause_evidence(item) if item["task"] == "describe" else None
            periods_in_turn = {}
            for p in pos:
                t = int(turn_of[b, p + 1])
                if clauses is not None:
                    k = periods_in_turn.get(t, 0)
                    if int(labels[b, p + 1]) in self.period_ids:
                        periods_in_turn[t] = k + 1
                    spans = clauses[k] if k < len(clauses) else None
                else:
                    spans = turn_evidence(item, t)
                ranges = video_token_ranges(spans or [], item["num_frames"], tokens_per_frame)
                if not ranges:
                    continue
                m = torch.zeros(L, dtype=torch.bool)
                for s, e in ranges:
                    m[video_start + s:video_start + e] = True
                rows.append(b)
                queries.append(p)
                masks.append(m)
        if not rows:
            return None
        return torch.tensor(rows), torch.tensor(queries), torch.stack(masks)


def evidence_loss(weights, head, targets):
    """Mean -log(attention mass on the evidence) of `head` ([B, H, L, L] probabilities)."""
    import torch
    rows, queries, key_mask = targets
    attn = weights[rows, head, queries]  # [N, L]
    mass = (attn * key_mask.to(attn.dtype)).sum(-1)
    return -torch.log(mass.clamp_min(1e-6)).mean(), mass.mean()
