#!/usr/bin/env python3
"""The shipped model as a compressed-tensors checkpoint, the layout llm-compressor writes.

Explicit commands, never run by the tests:
    .venv/bin/python tools/golden/gen_quantized_checkpoint.py --scheme int8
    .venv/bin/python tools/golden/gen_quantized_checkpoint.py --scheme fp8
then the transformers goldens of each checkpoint (SCHEME is int8 or fp8):
    .venv/bin/python tools/golden/gen_goldens.py \
        --model tests/data/golden/framezip-tiny-video-SCHEME/model \
        --out tests/data/golden/framezip-tiny-video-SCHEME --skip-tokenizer --synthvid test:42 --frames 6

The decoder's Linears (q/k/v/o, gate/up/down of every layer) get quantised weights, symmetric,
one scale per output channel; the vision tower, the projector and the head stay bf16 (the config's
`ignore` list).
  int8: int8 weights with activations declared dynamic int8 per token (W8A8, "int-quantized").
  fp8:  FP8 E4M3 weights alone (W8A16, "float-quantized"): activations stay bf16, which is what
        framezip's CPU does with an FP8 checkpoint, so the goldens test the weights' decoding.
The scales are compressed-tensors' own (`calculate_qparams`: the channel's largest magnitude over
127.5 for int8, so a channel whose largest magnitude is negative stores -128, and over 448 for
FP8), computed from the weights as llm-compressor's min-max observer would, without calibration
data: weights-only quantisation needs none. compressed-tensors then packs and saves the model;
the tokenizer and processor files are copied so transformers can run the checkpoint as it is.

Writes tests/data/golden/framezip-tiny-video-SCHEME/model/.
"""
import argparse
import pathlib
import shutil

import torch
from compressed_tensors.compressors import ModelCompressor
from compressed_tensors.quantization import (QuantizationArgs, QuantizationConfig,
                                             QuantizationScheme, apply_quantization_config)
from compressed_tensors.quantization.utils import calculate_qparams
from transformers import AutoModelForImageTextToText

ROOT = pathlib.Path(__file__).resolve().parents[2]
SOURCE = ROOT / "models" / "framezip-tiny-video"
COPIED = ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
          "preprocessor_config.json", "processor_config.json", "video_preprocessor_config.json",
          "generation_config.json"]


def scheme_of(name: str) -> tuple[QuantizationScheme, str]:
    """The quantisation scheme of the decoder's Linears, and the checkpoint format it packs to."""
    if name == "int8":
        weights = QuantizationArgs(num_bits=8, type="int", symmetric=True, strategy="channel")
        activations = QuantizationArgs(num_bits=8, type="int", symmetric=True, strategy="token",
                                       dynamic=True)
        return (QuantizationScheme(targets=["Linear"], weights=weights,
                                   input_activations=activations), "int-quantized")
    weights = QuantizationArgs(num_bits=8, type="float", symmetric=True, strategy="channel")
    return QuantizationScheme(targets=["Linear"], weights=weights), "float-quantized"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scheme", choices=["int8", "fp8"], required=True)
    args = parser.parse_args()
    out = ROOT / "tests" / "data" / "golden" / f"framezip-tiny-video-{args.scheme}" / "model"

    model = AutoModelForImageTextToText.from_pretrained(SOURCE, dtype=torch.bfloat16)
    scheme, quantization_format = scheme_of(args.scheme)
    config = QuantizationConfig(
        config_groups={"group_0": scheme},
        ignore=["lm_head", "re:.*vision_tower.*", "re:.*multi_modal_projector.*"],
        format=quantization_format)
    apply_quantization_config(model, config)
    quantised = 0
    for _, module in model.named_modules():
        if not hasattr(module, "weight_scale"):
            continue
        w = module.weight.data.float()
        scale, zero_point = calculate_qparams(w.amin(dim=1, keepdim=True).clamp(max=0),
                                              w.amax(dim=1, keepdim=True).clamp(min=0),
                                              scheme.weights)
        module.weight_scale.data = scale.to(module.weight_scale.dtype)
        module.weight_zero_point.data = zero_point.to(module.weight_zero_point.dtype)
        quantised += 1
    compressor = ModelCompressor.from_pretrained_model(model,
                                                       quantization_format=quantization_format)
    compressor.compress_model(model)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    model.save_pretrained(out)
    compressor.update_config(out)
    for name in COPIED:
        shutil.copy(SOURCE / name, out / name)
    print(f"{quantised} Linears quantised ({args.scheme}); wrote {out}")


if __name__ == "__main__":
    main()
