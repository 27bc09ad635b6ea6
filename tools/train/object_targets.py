"""Per-video-token auxiliary targets for stage 2: what each object has done so far.

The decoder answers direction, count and order questions at chance when trained on answers alone
(README.md, "History"): the answer position would have to discover, from one loss at the end of a
video, that it must compare an object's positions across frames or count its appearances. These
targets supervise the residual stream at the video tokens directly (deep supervision through a
linear probe that is thrown away after training), so the temporal facts are computed where the
evidence is and the answer only has to look them up.

Each pooled video token covers a quadrant of its frame (the 2x2 pooling). When exactly one object
is centred in that quadrant, the token gets that object's running facts up to its frame:
  onset      1 if the object is visible now and was not in the previous frame (an appearance starts)
  count      appearances (onsets) so far, 0..COUNT_CLASSES-1
  disp       (x, y) displacement since the object was first seen, in units of DISP_UNIT pixels
  rank       how many other objects were seen in frames strictly before its first frame
  colour, shape  the object's own (class indices), so the (colour, shape) binding the tower
             delivers survives in the layers that the other facts reshape
Tokens with no object or two objects, and the image_newline, are masked. Everything is causal:
a token's facts depend only on frames up to its own, as the decoder's attention is.
"""

from __future__ import annotations

import numpy as np

import synthvid

COUNT_CLASSES = 5
RANK_CLASSES = 6
DISP_UNIT = 32.0

COLORS = list(synthvid.COLORS)
SHAPES = synthvid.SHAPES

# Columns of the per-token target array.
ONSET, COUNT, DX, DY, RANK, COLOR, SHAPE, MASK = range(8)
WIDTH = 8
# Logit columns of the probe: onset (1), count (COUNT_CLASSES), disp (2), rank (RANK_CLASSES),
# colour, shape.
PROBE_WIDTH = 1 + COUNT_CLASSES + 2 + RANK_CLASSES + len(COLORS) + len(SHAPES)


def quadrant_token(p, grid: int) -> int:
    """Index of the pooled video token (row-major grid x grid) whose quadrant holds centre p."""
    cell = synthvid.CANVAS / grid
    return min(int(p[1] // cell), grid - 1) * grid + min(int(p[0] // cell), grid - 1)


def scene_targets(objs, num_frames: int, grid: int) -> np.ndarray:
    """[F, grid*grid, WIDTH] float32 targets for one scene (objects with per-frame tracks)."""
    F = num_frames
    out = np.zeros((F, grid * grid, WIDTH), np.float32)
    first = []
    for o in objs:
        seen = [t for t, p in enumerate(o.track) if p is not None]
        first.append(seen[0] if seen else F)
    for i, o in enumerate(objs):
        rank = sum(1 for j in range(len(objs)) if j != i and first[j] < first[i])
        onsets = 0
        p0 = o.track[first[i]] if first[i] < F else None
        for t in range(F):
            p = o.track[t]
            if p is None:
                continue
            onset = t == 0 or o.track[t - 1] is None
            onsets += int(onset)
            row = out[t, quadrant_token(p, grid)]
            row[MASK] += 1.0  # counts objects in this quadrant; > 1 is masked below
            row[ONSET] = float(onset)
            row[COUNT] = float(min(onsets, COUNT_CLASSES - 1))
            row[DX] = (p[0] - p0[0]) / DISP_UNIT
            row[DY] = (p[1] - p0[1]) / DISP_UNIT
            row[RANK] = float(min(rank, RANK_CLASSES - 1))
            row[COLOR] = float(COLORS.index(o.color))
            row[SHAPE] = float(SHAPES.index(o.shape))
    crowded = out[..., MASK] > 1.0
    out[crowded] = 0.0
    return out


def probe_loss(logits, targets, count_2plus_weight: float = 1.0):
    """logits [N, PROBE_WIDTH] and targets [N, WIDTH] of the unmasked tokens -> (loss, metrics).

    count_2plus_weight scales the count loss of the tokens whose running count is 2 or more: they
    are the few percent of tokens that need counting (most objects appear once), and the count
    answer is read from them."""
    import torch
    import torch.nn.functional as fn

    onset = fn.binary_cross_entropy_with_logits(logits[:, 0], targets[:, ONSET])
    c0 = 1
    count_logits = logits[:, c0:c0 + COUNT_CLASSES]
    count_per_token = fn.cross_entropy(count_logits, targets[:, COUNT].long(), reduction="none")
    if count_2plus_weight != 1.0:
        count_per_token = count_per_token * torch.where(targets[:, COUNT] >= 2,
                                                        count_2plus_weight, 1.0)
    count = count_per_token.mean()
    d0 = c0 + COUNT_CLASSES
    disp = ((logits[:, d0:d0 + 2] - targets[:, DX:DY + 1]) ** 2).sum(-1).mean()
    r0 = d0 + 2
    rank_logits = logits[:, r0:r0 + RANK_CLASSES]
    rank = fn.cross_entropy(rank_logits, targets[:, RANK].long())
    k0 = r0 + RANK_CLASSES
    color_logits = logits[:, k0:k0 + len(COLORS)]
    shape_logits = logits[:, k0 + len(COLORS):k0 + len(COLORS) + len(SHAPES)]
    identity = (fn.cross_entropy(color_logits, targets[:, COLOR].long())
                + fn.cross_entropy(shape_logits, targets[:, SHAPE].long()))
    with torch.no_grad():
        metrics = {
            "onset_acc": ((logits[:, 0] > 0).float() == targets[:, ONSET]).float().mean().item(),
            "count_acc": (count_logits.argmax(-1) == targets[:, COUNT].long()).float().mean().item(),
            "disp_abs_px": ((logits[:, d0:d0 + 2] - targets[:, DX:DY + 1]).abs().mean().item()
                            * DISP_UNIT),
            "rank_acc": (rank_logits.argmax(-1) == targets[:, RANK].long()).float().mean().item(),
            "identity_acc": ((color_logits.argmax(-1) == targets[:, COLOR].long())
                             & (shape_logits.argmax(-1) == targets[:, SHAPE].long()))
            .float().mean().item(),
        }
        # Counting is the rare, hard case: most tokens belong to objects seen once.
        many = targets[:, COUNT] >= 2
        if many.any():
            metrics["count_acc_2plus"] = (count_logits[many].argmax(-1)
                                          == targets[many, COUNT].long()).float().mean().item()
    return onset + count + disp + rank + identity, metrics


def is_count_question(question: str) -> bool:
    """Whether the question is synthvid's count template ("How many times does ... appear?")."""
    return question.startswith(synthvid.QUESTION["count"].split("{")[0])


def _named(question: str) -> tuple[list[int], list[int]]:
    """Indices of the colours and of the shapes the question's words name, in order."""
    words = [w.strip("?,.").lower() for w in question.split()]
    return ([COLORS.index(w) for w in words if w in COLORS],
            [SHAPES.index(w) for w in words if w in SHAPES])


def named_words(question: str) -> tuple[int, int]:
    """(colour index, shape index) the question names, -1 where it names none or more than one
    (an order question names two objects)."""
    colors, shapes = _named(question)
    return (colors[0] if len(colors) == 1 else -1, shapes[0] if len(shapes) == 1 else -1)


def named_object_tokens(question: str, facts: np.ndarray) -> np.ndarray:
    """Bool [n_tokens]: the video tokens (rows of `facts`) that show an object the question names.

    A question names an object by its colour, its shape or both ("the red circle"); colours and
    shapes are unique within a scene, so either word picks the one object (an order question
    names two). Only tokens with exactly one object centred in them count (MASK > 0)."""
    colors, shapes = _named(question)
    seen = facts[:, MASK] > 0
    hit = np.isin(facts[:, COLOR], colors) | np.isin(facts[:, SHAPE], shapes)
    return seen & hit


def last_appearance(keys: np.ndarray, facts: np.ndarray, tokens_per_frame: int) -> np.ndarray:
    """The part of `keys` (one object's tokens) from the frame of its last onset on: where the
    running count of appearances is the answer to "how many times does it appear?"."""
    onsets = np.flatnonzero(keys & (facts[:, ONSET] > 0))
    if len(onsets) == 0:
        return keys
    first_row = (onsets[-1] // tokens_per_frame) * tokens_per_frame
    out = keys.copy()
    out[:first_row] = False
    return out


def retrieval_loss(attn_rows, key_mask):
    """attn_rows [Q, L] attention probabilities of answer positions over all keys; key_mask [Q, L]
    the named object's tokens -> mean -log(attention mass on them)."""
    mass = (attn_rows * key_mask).sum(-1)
    return -mass.clamp_min(1e-6).log().mean(), mass.mean().item()


def answer_count_loss(logits, counts):
    """logits [Q, COUNT_CLASSES] read at count questions' answer positions, counts [Q] their
    answers (counts from COUNT_CLASSES - 1 on share the last class, as in the facts) ->
    (loss, accuracy)."""
    import torch.nn.functional as fn

    target = counts.clamp_max(COUNT_CLASSES - 1)
    accuracy = (logits.argmax(-1) == target).float().mean().item()
    return fn.cross_entropy(logits, target), accuracy


def word_probe_loss(h, color_targets, shape_targets, color_emb, shape_emb, scale):
    """Colour and shape read from hidden states h [N, H] through the decoder's own (frozen here)
    embeddings of the colour and shape words: logits = scale · rms_norm(h) · E[word]. Targets are
    class indices, -1 = none. Putting the video tokens' identity and the answer position's
    question words in the words' embedding directions makes "the token of the object the question
    names" a match of one direction against the same direction -> (loss, accuracy)."""
    import torch
    import torch.nn.functional as fn

    hn = fn.rms_norm(h, (h.shape[-1],))
    loss, hits, n = h.new_zeros(()), 0, 0
    for targets, emb in ((color_targets, color_emb), (shape_targets, shape_emb)):
        keep = targets >= 0
        if not keep.any():
            continue
        logits = scale * hn[keep] @ emb.T
        loss = loss + fn.cross_entropy(logits, targets[keep])
        with torch.no_grad():
            hits += (logits.argmax(-1) == targets[keep]).sum().item()
            n += int(keep.sum())
    return loss, hits / max(1, n)
