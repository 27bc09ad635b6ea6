#!/usr/bin/env python3
"""Makes an exported framezip-tiny-video deeper without changing what it computes.

New decoder layers are inserted where --insert-after says; each starts as the identity on the
residual stream (its attention output projection and MLP down projection are zero, so the layer
adds nothing), and the rest of its weights get the model's own random init, so training can grow
them from the first step. The grown model answers exactly as the old one until it is trained
(checked here on random token ids), so a continuation keeps what the smaller model learned: the
Net2Net/"progressive stacking" idea, used here to ask whether depth opens synthvid v2's two-hop
tasks that four layers stopped learning (README.md, "synthvid v2 fine-tuning").

  grow_depth.py --model .data/export_v2e --insert-after 2,3 --out .data/export_v2e_d6
"""

from __future__ import annotations

import argparse
import copy
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export import export_model  # noqa: E402


def identity_layer(template_layer, config, layer_idx):
    """A fresh decoder layer of the template's kind whose output adds nothing to the residual."""
    import torch

    layer = type(template_layer)(config, layer_idx)
    std = config.initializer_range
    for name, p in layer.named_parameters():
        with torch.no_grad():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            elif name.endswith("bias"):
                p.zero_()
            else:
                p.normal_(0.0, std)
    with torch.no_grad():
        layer.self_attn.o_proj.weight.zero_()
        layer.mlp.down_proj.weight.zero_()
    return layer


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="exported model folder")
    ap.add_argument("--insert-after", required=True,
                    help="comma-separated indices of the old layers a new layer follows "
                         "(-1 = before layer 0); an index may repeat")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import torch
    from transformers import AutoProcessor, LlavaOnevisionForConditionalGeneration

    torch.manual_seed(args.seed)
    processor = AutoProcessor.from_pretrained(args.model)
    model = LlavaOnevisionForConditionalGeneration.from_pretrained(args.model,
                                                                   dtype=torch.float32)
    model.eval()
    lm = model.model.language_model
    old_layers = list(lm.layers)
    try:
        after = sorted(int(i) for i in args.insert_after.split(","))
    except ValueError:
        sys.exit(f"--insert-after: comma-separated layer indices, got {args.insert_after!r}")
    if any(i < -1 or i >= len(old_layers) for i in after):
        sys.exit(f"--insert-after: indices must lie in -1..{len(old_layers) - 1}, got {after}")

    ids = torch.randint(0, model.config.text_config.vocab_size, (2, 48))
    with torch.no_grad():
        before = model(input_ids=ids).logits

    config = copy.deepcopy(model.config.text_config)
    config.num_hidden_layers = len(old_layers) + len(after)
    config.layer_types = ["full_attention"] * config.num_hidden_layers
    grown = []
    for i in after:
        if i == -1:
            grown.append(None)
    for j, layer in enumerate(old_layers):
        grown.append(layer)
        grown.extend(None for i in after if i == j)
    layers = []
    for idx, layer in enumerate(grown):
        if layer is None:
            layer = identity_layer(old_layers[0], config, idx)
        layer.self_attn.layer_idx = idx
        layers.append(layer)
    lm.layers = torch.nn.ModuleList(layers)
    lm.config = config
    model.config.text_config = config
    model.model.config.text_config = config

    with torch.no_grad():
        after_logits = model(input_ids=ids).logits
    err = (after_logits - before).abs().max().item()
    print(f"layers {len(old_layers)} -> {len(layers)}; max |logit change| {err:.2e}")
    if err > 1e-4:
        sys.exit("the grown model does not compute what the old one did")
    export_model(model, processor, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
