"""Where train_predictors.py's conversations come from: one interface over two kinds of cache.

- V1Source: prepare_data.py's pixel cache of synthvid v1 (the frozen vision tower runs every
  step); a conversation is an item's question plus sampled follow-ups, as train.py trains them.
- V2Source: prepare_features.py's caches of synthvid v2 (and optionally v1): the projector rows
  are cached, so a step splices them into the token embeddings (train_v2.splice_video) and runs
  the decoder only; a conversation is every turn of a v2 item, multi-turn sessions and the 20-60
  token descriptions included. This is what the output-text predictor needs: with v1's 1-3 token
  answers it has nothing to gate (README.md, "Dynamic-LLaVA predictors").

Both give batches of one frame count (the image predictor reads one block of equal length per
sample) and a forward that returns transformers' output (logits, and loss when labels are given).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train as trainlib  # noqa: E402
import train_v2  # noqa: E402


class V1Source:
    """synthvid v1 from the pixel cache."""

    eval_modes = ("full", "pruned", "random", "pruned_text", "full_two_turn")

    def __init__(self, cache_dir, split, tok, tpf, image_size, frames_per_batch):
        self.data = trainlib.Data(cache_dir, split, tok, tpf)
        assert self.data.frames.shape[-1] == image_size, "cache image size != model image size"
        self.items = self.data.items
        self.video_id = self.data.video_id
        self.frames_per_batch = frames_per_batch

    def batches(self, rng, items, scale=1):
        return trainlib.make_batches(rng, items, self.frames_per_batch * scale)

    def train_turns(self, rng, it):
        return trainlib.sample_turns(rng, it)

    def eval_conversations(self, batch, two_turn):
        """The item's question; with two_turn, one follow-up after it (the scored turn)."""
        convs = []
        for it in batch:
            turns = [(it["question"], it["answer"])]
            if two_turn:
                f = [x for x in it["followups"] if x["question"] != it["question"]]
                turns += [(x["question"], x["answer"]) for x in f[:1]]
            convs.append((it, turns))
        return convs

    def collate(self, convs):
        return self.data.collate(convs)

    def forward(self, model, b):
        return model(**b)


class V2Source:
    """synthvid v2 (and v1) from prepare_features.py's caches of projector rows."""

    # Every turn of a v2 item is scored, so the two-turn reference is the full run itself.
    eval_modes = ("full", "pruned", "random", "pruned_text")

    def __init__(self, caches, split, tok, tokens_per_batch):
        """caches: [(cache dir, "v1" | "v2")]; a cache without `split` is skipped."""
        self.splits = [train_v2.FeatureSplit(d, split, suite) for d, suite in caches
                       if os.path.exists(os.path.join(d, f"{split}.json"))]
        assert self.splits, f"no cache has a {split} split: {caches}"
        self.items = [it for s in self.splits for it in s.items]
        self.renderer = train_v2.Renderer(tok)
        self.video_id = self.renderer.video_id
        self.tokens_per_batch = tokens_per_batch

    def batches(self, rng, items, scale=1):
        return train_v2.make_batches(rng, items, self.tokens_per_batch * scale)

    def train_turns(self, rng, it):
        return train_v2.item_turns(rng, it)

    def eval_conversations(self, batch, two_turn):
        """Every turn of a v2 item (earlier turns with their correct answers); a v1 item's own
        question, as v1's evaluation asks it."""
        return [(it, train_v2.item_turns(None, it) if "turns" in it
                 else [(it["question"], it["answer"])]) for it in batch]

    def collate(self, convs):
        ids, labels, turn_of, mask, video = train_v2.collate(self.renderer, convs)
        return dict(input_ids=ids, attention_mask=mask, labels=labels, video_rows=video,
                    turn_of=turn_of)

    def forward(self, model, b):
        emb = train_v2.splice_video(model, b["input_ids"], b["video_rows"])
        return model(inputs_embeds=emb, attention_mask=b["attention_mask"],
                     labels=b.get("labels"))
