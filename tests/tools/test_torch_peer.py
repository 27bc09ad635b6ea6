#!/usr/bin/env python3
"""bench/gpu/torch_peer.py's correctness self-check, on the CPU, where a Python with torch exists.

Run: /usr/bin/python3 tests/tools/test_torch_peer.py. Runs `torch_peer.py --self-check` (tiny
shapes, f32, no GPU: the static-cache decoder's prefill, its graph-less decode steps and the step
a CUDA graph captures, run uncaptured, against the eager decoder and a cache-free recompute) with
the repository's .venv (scripts/python-env.sh, pinned torch) or this Python when it has torch;
prints "SKIPPED: ..." and exits 0 when neither has. Then checks that without a GPU the timing run
refuses at once (exit 2, a message naming the missing device) instead of hanging.
"""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PEER = os.path.join(ROOT, "bench", "gpu", "torch_peer.py")


def has_torch(python):
    try:
        return subprocess.run([python, "-c", "import torch"], capture_output=True,
                              timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


python = next((p for p in (os.path.join(ROOT, ".venv", "bin", "python"), sys.executable)
               if os.path.exists(p) and has_torch(p)), None)
if python is None:
    print("SKIPPED: no Python with torch (scripts/python-env.sh makes .venv with the pinned one)")
    sys.exit(0)

failed = 0
r = subprocess.run([python, PEER, "--self-check"], capture_output=True, text=True, timeout=300)
ok = r.returncode == 0 and "self-check on cpu" in r.stdout and ": ok" in r.stdout
print(f"{'ok  ' if ok else 'FAIL'} torch_peer.py --self-check on the CPU: "
      f"{(r.stdout + r.stderr).strip().splitlines()[-1] if (r.stdout + r.stderr).strip() else ''}")
failed += not ok

# The timing run without a GPU: refused at once. CUDA_VISIBLE_DEVICES="" hides any GPU here.
r = subprocess.run([python, PEER, "--quick"], capture_output=True, text=True, timeout=120,
                   env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
ok = r.returncode == 2 and "no CUDA device" in r.stderr
print(f"{'ok  ' if ok else 'FAIL'} without a GPU the timing run exits 2 naming it: "
      f"exit {r.returncode}, {r.stderr.strip()[:200]}")
failed += not ok
print(f"{2 - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
