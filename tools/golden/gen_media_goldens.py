#!/usr/bin/env python3
"""Goldens for media/ preprocessing, from transformers' own image and video processors.

Explicit command, never run by the tests:
    .venv/bin/python tools/golden/gen_media_goldens.py

Writes to tests/data/golden/media/:
  inputs/*.png          small deterministic test images (and the frames of one tiny video)
  <case>.f32            the processor's pixel_values, float32 little-endian, C-order
  manifest.json         per case: processor class, backend, arguments, input files, shape; and the
                        versions of transformers / torch / torchvision / Pillow used.
The C++ test (tests/unit/media/preprocess_golden_test.cc) runs media's preprocessing on the same
PNGs with the matching PreprocessSpec and compares within 1e-2 per value.

Sizes are small (32x32 outputs, at most ten tiles per case) so the committed goldens stay under 1 MB;
the arithmetic is the same at 384x384. Each image is chosen to hit one path: downscaling
(antialiased support), upscaling, and non-square aspect ratios for CLIP's shortest-edge + crop.
"""
import json
import pathlib
import sys

import numpy as np
import PIL
from PIL import Image
import torch
import torchvision
import transformers
from transformers import (CLIPImageProcessor, CLIPImageProcessorPil, LlavaOnevisionImageProcessor,
                          LlavaOnevisionImageProcessorPil, LlavaOnevisionVideoProcessor,
                          SiglipImageProcessor, SiglipImageProcessorPil)

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "data" / "golden" / "media"
SEED = 20261130
SIGLIP_MEAN = [0.5, 0.5, 0.5]
CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]


def make_image(rng, width, height):
    """Smooth gradients plus noise and a few hard edges: exercises every filter tap."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    r = 255 * (x / max(width - 1, 1))
    g = 255 * (y / max(height - 1, 1))
    b = 127 + 100 * np.sin(x / 3.0) * np.cos(y / 4.0)
    img = np.stack([r, g, b], axis=-1) + rng.normal(0, 25, size=(height, width, 3))
    img[height // 3: height // 3 + 3, :, :] = [255, 0, 255]  # a hard stripe
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def save(name, array):
    path = OUT / name
    array.astype("<f4").tofile(path)
    return {"file": name, "shape": list(array.shape)}


def main():
    rng = np.random.default_rng(SEED)
    (OUT / "inputs").mkdir(parents=True, exist_ok=True)
    images = {
        "down_67x45": make_image(rng, 67, 45),   # downscale to 32x32
        "up_19x27": make_image(rng, 19, 27),     # upscale, portrait
        "wide_80x30": make_image(rng, 80, 30),   # wide: CLIP crops the width
    }
    for name, img in images.items():
        Image.fromarray(img).save(OUT / "inputs" / f"{name}.png")
    frames = np.stack([make_image(rng, 50, 38) for _ in range(4)])
    for i, frame in enumerate(frames):
        Image.fromarray(frame).save(OUT / "inputs" / f"video_frame{i}.png")

    # Read back what was written, so the goldens are of exactly the committed bytes.
    loaded = {n: np.array(Image.open(OUT / "inputs" / f"{n}.png").convert("RGB")) for n in images}
    video = np.stack([np.array(Image.open(OUT / "inputs" / f"video_frame{i}.png").convert("RGB"))
                      for i in range(4)])

    cases = []
    siglip_args = dict(size={"height": 32, "width": 32}, image_mean=SIGLIP_MEAN, image_std=SIGLIP_MEAN)
    clip_args = dict(size={"shortest_edge": 24}, crop_size={"height": 24, "width": 24})
    for backend, siglip_cls, clip_cls in (("torchvision", SiglipImageProcessor, CLIPImageProcessor),
                                          ("pil", SiglipImageProcessorPil, CLIPImageProcessorPil)):
        siglip = siglip_cls(**siglip_args)
        clip = clip_cls(**clip_args)
        for name, img in loaded.items():
            pv = siglip(images=Image.fromarray(img), return_tensors="np")["pixel_values"][0]
            cases.append({"name": f"siglip_{backend}_{name}", "processor": type(siglip).__name__,
                          "backend": backend, "args": siglip_args, "inputs": [f"inputs/{name}.png"],
                          **save(f"siglip_{backend}_{name}.f32", pv)})
            pv = clip(images=Image.fromarray(img), return_tensors="np")["pixel_values"][0]
            cases.append({"name": f"clip_{backend}_{name}", "processor": type(clip).__name__,
                          "backend": backend, "args": {**clip_args, "image_mean": CLIP_MEAN,
                                                       "image_std": CLIP_STD},
                          "inputs": [f"inputs/{name}.png"], **save(f"clip_{backend}_{name}.f32", pv)})

    video_args = dict(size={"height": 32, "width": 32}, image_mean=SIGLIP_MEAN, image_std=SIGLIP_MEAN)
    vp = LlavaOnevisionVideoProcessor(**video_args)
    pv = vp(videos=[video], return_tensors="np")["pixel_values_videos"][0]  # [F, 3, 32, 32]
    cases.append({"name": "llava_onevision_video", "processor": type(vp).__name__,
                  "backend": "torchvision", "args": video_args,
                  "inputs": [f"inputs/video_frame{i}.png" for i in range(4)],
                  **save("llava_onevision_video.f32", pv)})

    # LLaVA-OneVision's anyres tiles of a single image (base tile first, then the canvas's tiles
    # row-major), with 32-pixel tiles and canvases of up to 3x3 tiles like the real 384-pixel
    # list. Two more images, made after the video so the earlier inputs keep their bytes: one
    # much larger than any canvas (downscaled to fit) and one tall.
    for name, (w, h) in (("large_150x110", (150, 110)), ("tall_40x100", (40, 100))):
        Image.fromarray(make_image(rng, w, h)).save(OUT / "inputs" / f"{name}.png")
        loaded[name] = np.array(Image.open(OUT / "inputs" / f"{name}.png").convert("RGB"))
    anyres_args = dict(size={"height": 32, "width": 32}, image_mean=SIGLIP_MEAN,
                       image_std=SIGLIP_MEAN,
                       image_grid_pinpoints=[[32 * h, 32 * w] for h in (1, 2, 3) for w in (1, 2, 3)])
    # Every image through the default (torchvision) backend; one through the PIL one, whose
    # resampling the SigLIP cases above already cover.
    for backend, cls, names in (("torchvision", LlavaOnevisionImageProcessor, list(loaded)),
                                ("pil", LlavaOnevisionImageProcessorPil, ["wide_80x30"])):
        processor = cls(**anyres_args)
        for name in names:
            img = loaded[name]
            out = processor(images=Image.fromarray(img), return_tensors="np")
            pv = out["pixel_values"][0]  # [1 + tiles, 3, 32, 32]
            assert [int(x) for x in out["image_sizes"][0]] == list(img.shape[:2])
            cases.append({"name": f"anyres_{backend}_{name}", "processor": type(processor).__name__,
                          "backend": backend, "args": anyres_args,
                          "inputs": [f"inputs/{name}.png"],
                          **save(f"anyres_{backend}_{name}.f32", pv)})

    manifest = {
        "generator": "tools/golden/gen_media_goldens.py",
        "seed": SEED,
        "dtype": "float32 little-endian, C order",
        "versions": {"python": sys.version.split()[0], "transformers": transformers.__version__,
                     "torch": torch.__version__, "torchvision": torchvision.__version__,
                     "pillow": PIL.__version__, "numpy": np.__version__},
        "cases": cases,
    }
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"wrote {len(cases)} cases to {OUT}")


if __name__ == "__main__":
    main()
