#!/usr/bin/env bash
# One prepared training run for the GPU machine: framezip-tiny-video trained for a wall-clock
# budget on synthvid frames rendered in the DataLoader's workers (tools/train/train_render.py),
# the bf16 export, checkpoint and logs left under $OUT. The whole script ends within 510 s
# (8.5 min): the training budget shrinks to fit whatever the start-up took.
#
#   bash scripts/gpu-train.sh                          # from models/framezip-tiny-video, 7 min
#   bash scripts/gpu-train.sh --init-from DIR|TAR      # continue from an earlier run's export
#   bash scripts/gpu-train.sh --from-scratch           # a fresh model (fzmodel.py)
#   bash scripts/gpu-train.sh --rehearse               # the same path on the CPU, toy sizes:
#                                                      # run 1, then run 2 from run 1's export.tar
# Options: --budget-min M (training minutes, default 7), --trainable decoder|projector|all,
#   --lr X, and anything after `--` goes to train_render.py as is.
#
# Under $OUT (the device tool's folder; .data/gpu-train-out when unset), 6 files:
#   gpu-train.log      everything printed
#   summary.txt        device, steps, throughput, padding, data wait, validation before/after
#   export.tar         the bf16 export (config.json, model.safetensors, tokenizer and processor
#                      files, training_log_render.jsonl): models/framezip-tiny-video's layout
#   training_log_render.jsonl
#   ckpt/ckpt.pt       fp32 model + AdamW state + step (train_render.py --resume reads it),
#                      ~12 MB (15 MB with --trainable all), and ckpt/training_log_render.jsonl
# A rehearsal writes the same under $OUT/run1 and $OUT/run2.
#
# Needs only what the GPU image has: python3 with torch, transformers, tokenizers, numpy, pillow
# (torchvision for the video processor); no PyAV, no network, nothing carried for the default
# run. A continued run needs the earlier export carried (tools/train/README.md, "GPU run").
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
t0=$SECONDS
deadline_s=510
rehearse=0
init=models/framezip-tiny-video
scratch=0
budget_min=7
trainable=decoder
lr=""
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rehearse) rehearse=1 ;;
    --init-from) init=$2; shift ;;
    --from-scratch) scratch=1 ;;
    --budget-min) budget_min=$2; shift ;;
    --trainable) trainable=$2; shift ;;
    --lr) lr=$2; shift ;;
    --) shift; extra=("$@"); break ;;
    *) echo "gpu-train.sh: unknown option $1 (see the header of scripts/gpu-train.sh)" >&2
       exit 2 ;;
  esac
  shift
done
OUT=${OUT:-.data/gpu-train-out}
mkdir -p "$OUT"
# The device's python3 holds torch; here scripts/python-env.sh's .venv does.
PY=${PY:-}
[ -z "$PY" ] && { [ -x .venv/bin/python ] && PY=.venv/bin/python || PY=python3; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# One run: $1 = output folder, $2 = init (folder, .tar or "scratch"), $3 = training minutes,
# then train_render.py options.
train_once() {
  local out=$1 from=$2 minutes=$3
  shift 3
  mkdir -p "$out/ckpt"
  local src=(--init-from "$from")
  if [ "$from" = scratch ]; then
    src=(--from-scratch)
  elif [ "${from%.tar}" != "$from" ]; then
    mkdir -p "$work/init" && tar -xf "$from" -C "$work/init" || return 1
    src=(--init-from "$work/init/export")
  elif [ ! -f "$from/config.json" ]; then
    echo "gpu-train.sh: --init-from $from: no config.json there (an exported model folder or" \
      "the export.tar of an earlier run)" >&2
    return 1
  fi
  local export=$work/export
  rm -rf "$export"
  # Training stops 60 s before the deadline: the final evaluation, the export and the tar.
  local end_by=$(( $(date +%s) + deadline_s - (SECONDS - t0) - 60 ))
  local args=("${src[@]}" --ckpt-dir "$out/ckpt" --export "$export" --time-budget-min "$minutes"
    --end-by "$end_by" --trainable "$trainable" ${lr:+--lr "$lr"} "$@" "${extra[@]}")
  echo "gpu-train.sh: from $from: $PY tools/train/train_render.py ${args[*]}"
  PYTHONUNBUFFERED=1 timeout $((deadline_s - (SECONDS - t0) - 5)) \
    "${nice[@]}" "$PY" tools/train/train_render.py "${args[@]}"
  local rc=$?
  # A run cut short still leaves its last checkpoint's export.
  if [ -f "$export/config.json" ]; then
    tar -cf "$out/export.tar" -C "$work" export
    cp "$export/training_log_render.jsonl" "$out/" 2>/dev/null
  fi
  "$PY" - "$out" "$rc" <<'EOF' | tee "$out/summary.txt"
import json, os, sys
out, rc = sys.argv[1], sys.argv[2]
path = os.path.join(out, "training_log_render.jsonl")
recs = [json.loads(l) for l in open(path)] if os.path.exists(path) else []
cfg = next((r for r in recs if r["type"] == "config"), {})
vals = [r for r in recs if r["type"] == "val"]
train = [r for r in recs if r["type"] == "train"]
end = next((r for r in recs if r["type"] == "end"), {})
print(f"exit {rc}; device {cfg.get('device_name')}; torch {cfg.get('torch')}; "
      f"transformers {cfg.get('transformers')}; init {cfg.get('args', {}).get('init_from')}")
print(f"setup {cfg.get('setup_s')} s; packed-forward check max |dlogit| "
      f"{cfg.get('packed_check_max_abs_err')}")
if end:
    print(f"trained {end['step']} steps, {end['samples']} chats, {end['tokens']} tokens in "
          f"{end['train_s']} s (budget {end.get('budget_s')} s, ended by {end['ended_by']})")
late = train[len(train) // 2:]  # the second half: workers warm
if late:
    mean = lambda k: sum(r[k] for r in late) / len(late)
    print(f"second half: {mean('tokens_per_s'):.0f} tokens/s, {mean('frames_per_s'):.0f} "
          f"frames/s ({mean('distinct_frames'):.3f} distinct), padding {mean('padding'):.3f}, "
          f"data wait {mean('data_wait'):.3f}, loss {late[-1]['loss']}")
for v in vals:
    print(f"val step {v['step']}: {v['acc']} over {v['turns']} turns; {v['per_suite']}; "
          f"{v['per_turn']}")
if vals:
    print("per task (last):", json.dumps(vals[-1]["per_task"]))
EOF
  return "$rc"
}

nice=()
status=0
if [ "$rehearse" = 1 ]; then
  nice=(nice -n 19)
  toy=(--device cpu --tokens-per-step 4096 --row-tokens 4096 --workers 1 --val-v2 12
    --val-v1 12 --check-chats 4 --warmup 5 --ckpt-every-min 0.25 --eval-every-min 0.2 --log-every 1)
  from=$init
  [ "$scratch" = 1 ] && from=scratch
  echo "== rehearsal run 1 (from $from) =="
  train_once "$OUT/run1" "$from" 0.4 "${toy[@]}" 2>&1 | tee "$OUT/run1.log"
  status=${PIPESTATUS[0]}
  if [ "$status" = 0 ]; then
    echo "== rehearsal run 2 (from run 1's export.tar) =="
    train_once "$OUT/run2" "$OUT/run1/export.tar" 0.25 "${toy[@]}" 2>&1 | tee "$OUT/run2.log"
    status=${PIPESTATUS[0]}
  fi
  echo "gpu-train.sh --rehearse: exit $status in $((SECONDS - t0)) s"
  exit "$status"
fi

if ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "gpu-train.sh: $PY's torch sees no GPU; on the CPU use --rehearse" | tee "$OUT/gpu-train.log"
  exit 1
fi
from=$init
[ "$scratch" = 1 ] && from=scratch
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null
  train_once "$OUT" "$from" "$budget_min" --device cuda --eval-every-min 2.5
  status=$?
  echo "gpu-train.sh: exit $status in $((SECONDS - t0)) s"
  exit "$status"
} 2>&1 | tee "$OUT/gpu-train.log"
exit "${PIPESTATUS[0]}"
