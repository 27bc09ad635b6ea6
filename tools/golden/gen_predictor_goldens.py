#!/usr/bin/env python3
"""Writes the PyTorch reference outputs of the Dynamic-LLaVA predictors of a trained model folder,
for the C++ port's golden test.

An explicit command, never run by tests. From the source root:

  .venv/bin/python tools/golden/gen_predictor_goldens.py \
      --model models/framezip-tiny-video --golden tests/data/golden/framezip-tiny-video

Input: the real hidden states entering decoder layer `sparse_layer` (2) of the forward golden
(`forward.safetensors` "decoder.hidden_states.<sparse_layer>", bf16, HF output_hidden_states),
upcast exactly to f32. The image predictor sees the <video> placeholder rows (input ids of
`forward.json` equal to the config's video_token_index), as one sample, all valid; the text
predictor sees every row.

Writes <golden>/predictors_golden.safetensors (f32 unless noted):
  image.hidden  [N_vis, C]  the video rows of the hidden states
  image.logits  [N_vis, 2]  image_predictor(image.hidden[None], all valid)[0]
  image.rows    [N_vis]     int32, row indices of the video rows within the prompt
  text.hidden   [M, C]      every row of the hidden states
  text.logits   [M, 2]      text_predictor on every row
and metadata: torch version, predictors.safetensors sha256, the command. The predictors are built
and loaded by tools/train/train_predictors.py's own load_predictors(). A float64 copy of the
predictors is run on the same inputs and max |f32 - f64| printed (the f32 noise level).

It also runs the whole shipped model (loaded as gen_goldens.py loads it: dtype "auto" = bf16,
eager attention) on the forward golden's input (forward.json input_ids, forward.safetensors
pixel_values_videos, which hold exactly what gen_goldens.py fed the model), with Dynamic-LLaVA's
physical image-token pruning from train_predictors.py (install(), SparseState mode "prune",
image_hidden(), topk_keep_index()): at the entry of decoder layer sparse_layer the image predictor
scores the video rows (the bf16 hidden states upcast to f32, as the f32 predictors need), the top
k = int(N_vis * vision_keep_rate) are kept in their original order, the other video rows are removed
from layers >= sparse_layer, RoPE keeps the original positions. Writes:
  prune.logits     [1, vocab]  last prompt position's logits (model dtype, upcast to f32)
  prune.kept_rows  [k]         int32, prompt rows of the kept video tokens
  dense.logits     [1, vocab]  the same forward with mode None (no pruning), checked against
                               forward.safetensors' last logits row
No pruned greedy continuation: train_predictors' machinery has no cached decode in prune mode
(after a pruned prefill, layers >= sparse_layer cache fewer K/V rows than layers < sparse_layer,
while transformers builds one decode mask from layer 0's cache length; see the metadata).
"""

import argparse
import hashlib
import json
import os
import sys

import torch
from safetensors import safe_open
from safetensors.torch import save_file

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
import train_predictors  # noqa: E402


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


PRUNE_GREEDY_ABSENT = (
    "train_predictors' prune mode has no cached decode: after the pruned prefill layers >= "
    "sparse_layer cache k + text rows, layers < sparse_layer all rows, but transformers builds one "
    "decode mask from layer 0's cache length, so mode None fails (here a 41-key mask on 21 cached keys) and mode "
    "'prune' re-runs decide() on the decode token and only works by broadcasting a [1,1,1,1] mask")


def prune_goldens(args, preds, layer, rate, video_id, ids):
    """The shipped model's last prompt logits with and without Dynamic-LLaVA prune mode."""
    from transformers import LlavaOnevisionForConditionalGeneration as OV

    with open(os.path.join(args.model, "config.json")) as f:
        assert json.load(f)["model_type"] == "llava_onevision"
    # As tools/golden/gen_goldens.py loads it (the shipped dtype, bf16).
    model = OV.from_pretrained(args.model, dtype="auto", attn_implementation="eager").eval()
    dtype = next(model.parameters()).dtype
    with safe_open(os.path.join(args.golden, "forward.safetensors"), "pt") as f:
        pvv = f.get_tensor("pixel_values_videos")  # [F, 3, S, S], already in the model dtype
        ref = f.get_tensor("logits")[-1].float()
    assert pvv.dtype == dtype, (pvv.dtype, dtype)
    input_ids = ids[None]
    attention_mask = torch.ones_like(input_ids)  # what the processor returned: one prompt, no padding
    img_mask = input_ids == video_id
    n_vis = int(img_mask.sum())
    k = max(1, int(n_vis * rate))

    state = train_predictors.SparseState(layer)
    train_predictors.install(model, state)

    def decide(hidden):
        # The predictors are f32 (train_predictors ran an f32 model); the shipped model hands bf16.
        h = train_predictors.image_hidden(hidden.float(), img_mask)
        lg = preds.image_predictor(h, torch.ones(1, n_vis, dtype=torch.bool))
        return train_predictors.topk_keep_index(lg.log_softmax(-1)[..., 0], img_mask, k)

    def last_logits():
        out = model(input_ids=input_ids, attention_mask=attention_mask, pixel_values_videos=pvv[None],
                    use_cache=False, return_dict=True)
        return out.logits[:, -1].float().contiguous()

    with torch.no_grad():
        state.mode = None
        dense = last_logits()
        state.mode, state.decide = "prune", decide
        pruned = last_logits()
        keep_idx = state.keep_idx[0]
        state.mode, state.decide = None, None
    kept_rows = [int(r) for r in keep_idx if bool(img_mask[0, r])]
    assert len(kept_rows) == k and keep_idx.numel() == ids.numel() - n_vis + k
    d_anchor = float((dense[0] - ref).abs().max())
    ref_max = float(ref.abs().max())
    # The decoder golden test's tolerance (normalised max error 2e-2).
    assert d_anchor <= 2e-2 * ref_max, (d_anchor, ref_max)
    assert int(dense.argmax()) == int(ref.argmax())
    d_prune = float((pruned - dense).abs().max())
    meta = {
        "model_sha256": sha256(os.path.join(args.model, "model.safetensors")),
        "model_dtype": str(dtype),
        "prune_input": "forward.json input_ids + forward.safetensors pixel_values_videos, attention_mask ones",
        "prune_vision_keep_rate": repr(rate),
        "prune_k": str(k),
        "prune_kept_rows": json.dumps(kept_rows),
        "max_abs_diff_dense_vs_forward_last_logits": repr(d_anchor),
        "max_abs_diff_prune_vs_dense_logits": repr(d_prune),
        "argmax_prune": str(int(pruned.argmax())),
        "argmax_dense": str(int(dense.argmax())),
        "prune_greedy": "absent: " + PRUNE_GREEDY_ABSENT,
    }
    tensors = {
        "prune.logits": pruned,
        "prune.kept_rows": torch.tensor(kept_rows, dtype=torch.int32),
        "dense.logits": dense,
    }
    return {"tensors": tensors, "meta": meta, "kept_rows": kept_rows, "kept_len": keep_idx.numel(),
            "d_anchor": d_anchor, "ref_max": ref_max, "d_prune": d_prune,
            "argmax_prune": int(pruned.argmax()), "argmax_dense": int(dense.argmax()),
            "argmax_ref": int(ref.argmax())}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="models/framezip-tiny-video")
    ap.add_argument("--golden", default="tests/data/golden/framezip-tiny-video",
                    help="forward golden folder (read) and where predictors_golden.safetensors goes")
    args = ap.parse_args()

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(0)

    preds, pcfg = train_predictors.load_predictors(args.model)
    preds = preds.float().eval()
    preds64 = train_predictors.load_predictors(args.model)[0].double().eval()
    layer = int(pcfg["sparse_layer"])

    with open(os.path.join(args.model, "config.json")) as f:
        video_id = int(json.load(f)["video_token_index"])
    with open(os.path.join(args.golden, "forward.json")) as f:
        ids = torch.tensor(json.load(f)["input_ids"], dtype=torch.int64)
    name = f"decoder.hidden_states.{layer}"
    with safe_open(os.path.join(args.golden, "forward.safetensors"), "pt") as f:
        h_raw = f.get_tensor(name)
    assert h_raw.dtype == torch.bfloat16, h_raw.dtype
    if h_raw.dim() == 3:
        assert h_raw.shape[0] == 1
        h_raw = h_raw[0]
    assert h_raw.shape == (ids.numel(), pcfg["hidden_size"]), (h_raw.shape, ids.numel())
    h = h_raw.float()  # bf16 -> f32 is exact
    assert torch.equal(h.to(torch.bfloat16), h_raw)

    rows = torch.nonzero(ids == video_id)[:, 0]
    n_vis = rows.numel()
    assert n_vis > 0
    img_h = h[rows].contiguous()

    def run(p, x_img, x_all):
        with torch.no_grad():
            valid = torch.ones(1, x_img.shape[0], dtype=torch.bool)
            return p.image_predictor(x_img[None], valid)[0], p.text_predictor(x_all)

    img_lg, txt_lg = run(preds, img_h, h)
    img_lg64, txt_lg64 = run(preds64, img_h.double(), h.double())
    d_img = float((img_lg.double() - img_lg64).abs().max())
    d_txt = float((txt_lg.double() - txt_lg64).abs().max())

    tensors = {
        "image.hidden": img_h,
        "image.logits": img_lg.float().contiguous(),
        "image.rows": rows.to(torch.int32).contiguous(),
        "text.hidden": h.contiguous(),
        "text.logits": txt_lg.float().contiguous(),
    }
    cmd = "tools/golden/gen_predictor_goldens.py " + " ".join(sys.argv[1:])
    meta = {
        "format": "pt",
        "torch": torch.__version__,
        "predictors_sha256": sha256(os.path.join(args.model, "predictors.safetensors")),
        "predictors": os.path.join(args.model, "predictors.safetensors"),
        "input": f"{os.path.join(args.golden, 'forward.safetensors')} {name} (bf16 -> f32)",
        "sparse_layer": str(layer),
        "video_token_index": str(video_id),
        "max_abs_diff_f32_vs_f64_image_logits": repr(d_img),
        "max_abs_diff_f32_vs_f64_text_logits": repr(d_txt),
        "command": cmd,
    }
    rate = float(pcfg["vision_keep_rate"])
    k = max(1, int(n_vis * rate))
    score = img_lg.log_softmax(-1)[..., 0]
    top = sorted(score.topk(k).indices.tolist())

    pr = prune_goldens(args, preds, layer, rate, video_id, ids)
    golden_rows = [int(rows[i]) for i in top]
    if pr["kept_rows"] != golden_rows:
        sys.exit(f"the pruned forward kept video rows {pr['kept_rows']}, the golden hidden states' top-k "
                 f"is {golden_rows}: this machine's bf16 forward differs from forward.safetensors "
                 "enough to flip a near-tie; regenerate the forward golden here first")
    tensors.update(pr["tensors"])
    meta.update(pr["meta"])

    out = os.path.join(args.golden, "predictors_golden.safetensors")
    save_file(tensors, out, metadata=meta)
    score64 = img_lg64.log_softmax(-1)[..., 0]
    top64 = sorted(score64.topk(k).indices.tolist())
    text_keep = (txt_lg[..., 0] > txt_lg[..., 1])
    print(f"wrote {out} ({os.path.getsize(out)} bytes)")
    print(f"torch {torch.__version__}; predictors sha256 {meta['predictors_sha256']}")
    print(f"N_vis {n_vis}, rows {rows.tolist()}")
    print(f"max |f32 - f64|: image logits {d_img:.3e}, text logits {d_txt:.3e}")
    print(f"image keep top-k (k={k}) indices into the video rows: {top} (f64: {top64}); "
          f"prompt rows {[int(rows[i]) for i in top]}")
    srt = score.sort(descending=True)
    print("image scores (desc):", [(int(i), round(float(s), 5)) for s, i in zip(srt.values, srt.indices)])
    print(f"text keep (logit0 > logit1): {int(text_keep.sum())}/{text_keep.numel()}")
    print(f"model {pr['meta']['model_dtype']}; pruned forward keeps {pr['kept_len']}/{ids.numel()} rows, "
          f"video rows {pr['kept_rows']} (= the golden top-k)")
    print(f"dense.logits vs forward.safetensors last logits row: max |diff| {pr['d_anchor']:.4g} "
          f"(max |ref| {pr['ref_max']:.4g}; bf16 rounding of this machine vs the one that made it)")
    print(f"max |prune.logits - dense.logits| {pr['d_prune']:.4g}; argmax prune {pr['argmax_prune']}, "
          f"dense {pr['argmax_dense']} (forward golden {pr['argmax_ref']})")
    print(f"prune.greedy: not written ({PRUNE_GREEDY_ABSENT})")


if __name__ == "__main__":
    main()
