"""A chat as the model's chat template writes it, tokenised, with the labels training needs.

The llava-hf OneVision template with no system prompt: per turn
`<|im_start|>user\\n[<video>\\n on the first turn]{question}<|im_end|>\\n<|im_start|>assistant\\n`
then `{answer}<|im_end|>\\n`. train.py and train_v2.py check at start that this equals
`processor.apply_chat_template` and the processor's token ids.
"""

from __future__ import annotations


class CachedEncoder:
    """tok(s, add_special_tokens=False)["input_ids"], remembered per string: a training run renders
    the same few templates and questions thousands of times."""

    def __init__(self, tok):
        self.tok = tok
        self._ids = {}

    def __call__(self, s):
        ids = self._ids.get(s)
        if ids is None:
            ids = self._ids[s] = self.tok(s, add_special_tokens=False)["input_ids"]
        return ids


def template_conversation(turns):
    """turns: [(question, answer)] -> the messages `processor.apply_chat_template` takes for the
    same chat (the video in the first user message), to check render_turns against."""
    conv = []
    for i, (q, a) in enumerate(turns):
        content = ([{"type": "video"}] if i == 0 else []) + [{"type": "text", "text": q}]
        conv += [{"role": "user", "content": content},
                 {"role": "assistant", "content": [{"type": "text", "text": a}]}]
    return conv


def render_turns(enc, turns):
    """enc: str -> token ids (no special tokens added); turns: [(question, answer)].

    Returns (ids, labels, turn_of, text): labels are -100 except on each answer and its
    <|im_end|> (what the loss reads); turn_of gives each labelled position its turn's index and -1
    elsewhere; text is the rendered string. The single <video> placeholder is not expanded."""
    ids, labels, turn_of, text = [], [], [], ""
    for i, (q, a) in enumerate(turns):
        user = "<|im_start|>user\n" + ("<video>\n" if i == 0 else "") + q + \
            "<|im_end|>\n<|im_start|>assistant\n"
        for piece, labelled in ((user, False), (a + "<|im_end|>", True), ("\n", False)):
            p = enc(piece)
            ids += p
            labels += p if labelled else [-100] * len(p)
            turn_of += [i if labelled else -1] * len(p)
        text += user + a + "<|im_end|>\n"
    return ids, labels, turn_of, text
