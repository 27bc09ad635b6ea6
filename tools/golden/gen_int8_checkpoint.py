#!/usr/bin/env python3
"""The shipped model as a compressed-tensors int8 checkpoint, the layout llm-compressor writes.

Explicit command, never run by the tests:
    .venv/bin/python tools/golden/gen_int8_checkpoint.py
then the transformers goldens of that checkpoint:
    .venv/bin/python tools/golden/gen_goldens.py \
        --model tests/data/golden/framezip-tiny-video-int8/model \
        --out tests/data/golden/framezip-tiny-video-int8 --skip-tokenizer --synthvid test:42 --frames 6

The decoder's Linears (q/k/v/o, gate/up/down of every layer) get int8 weights, symmetric, one
scale per output channel, with activations declared dynamic int8 per token (W8A8, "int-quantized");
the vision tower, the projector and the head stay bf16 (the config's `ignore` list). The scales
are compressed-tensors' own (`calculate_qparams`: the channel's largest magnitude over 127.5, so a
channel whose largest magnitude is negative stores -128), computed from the weights as
llm-compressor's min-max observer would, without calibration data: weights-only quantisation
needs none. compressed-tensors then packs and saves the model; the tokenizer and processor files
are copied so transformers can run the checkpoint as it is.

Writes tests/data/golden/framezip-tiny-video-int8/model/.
"""
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
OUT = ROOT / "tests" / "data" / "golden" / "framezip-tiny-video-int8" / "model"
COPIED = ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
          "preprocessor_config.json", "processor_config.json", "video_preprocessor_config.json",
          "generation_config.json"]


def main() -> None:
    model = AutoModelForImageTextToText.from_pretrained(SOURCE, dtype=torch.bfloat16)
    weights = QuantizationArgs(num_bits=8, type="int", symmetric=True, strategy="channel")
    activations = QuantizationArgs(num_bits=8, type="int", symmetric=True, strategy="token",
                                   dynamic=True)
    config = QuantizationConfig(
        config_groups={"group_0": QuantizationScheme(targets=["Linear"], weights=weights,
                                                     input_activations=activations)},
        ignore=["lm_head", "re:.*vision_tower.*", "re:.*multi_modal_projector.*"],
        format="int-quantized")
    apply_quantization_config(model, config)
    quantised = 0
    for _, module in model.named_modules():
        if not hasattr(module, "weight_scale"):
            continue
        w = module.weight.data.float()
        scale, zero_point = calculate_qparams(w.amin(dim=1, keepdim=True).clamp(max=0),
                                              w.amax(dim=1, keepdim=True).clamp(min=0), weights)
        module.weight_scale.data = scale.to(module.weight_scale.dtype)
        module.weight_zero_point.data = zero_point.to(module.weight_zero_point.dtype)
        quantised += 1
    compressor = ModelCompressor.from_pretrained_model(model, quantization_format="int-quantized")
    compressor.compress_model(model)
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    model.save_pretrained(OUT)
    compressor.update_config(OUT)
    for name in COPIED:
        shutil.copy(SOURCE / name, OUT / name)
    print(f"{quantised} Linears in int8; wrote {OUT}")


if __name__ == "__main__":
    main()
