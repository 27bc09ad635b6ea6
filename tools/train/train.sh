#!/usr/bin/env bash
# Reproduces models/framezip-tiny-video from scratch: generate data -> cache frames -> train ->
# export -> evaluate on the test split. Everything runs under nice 19 on the CPU.
#   tools/train/train.sh     # full run: ~11 min data + ~11 min stage 1 + 75 min stage 2 + eval
#   SEED=0 STAGE1_STEPS=12000 TIME_BUDGET_MIN=75 MAX_STEPS=100000 TRAIN_COUNT=9000 tools/train/train.sh
# Both stages stop on whichever comes first, step count or time budget (see README.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
DATA=${DATA:-.data/synthvid}
CACHE=${CACHE:-.data/cache}
RUN=${RUN:-.data/train}
EXPORT=${EXPORT:-models/framezip-tiny-video}
SEED=${SEED:-0}
TRAIN_COUNT=${TRAIN_COUNT:-9000}
VAL_COUNT=${VAL_COUNT:-600}
TEST_COUNT=${TEST_COUNT:-600}
STAGE1_STEPS=${STAGE1_STEPS:-12000}
STAGE1_BUDGET_MIN=${STAGE1_BUDGET_MIN:-16}
TIME_BUDGET_MIN=${TIME_BUDGET_MIN:-75}
MAX_STEPS=${MAX_STEPS:-100000}
N="nice -n 19"

echo "[1/4] synthvid -> $DATA"
for k in 0 1; do
  $N $PY tools/synthvid/synthvid.py --split train --count "$TRAIN_COUNT" --shard $k/2 --out "$DATA" &
done
$N $PY tools/synthvid/synthvid.py --split val --count "$VAL_COUNT" --out "$DATA"
$N $PY tools/synthvid/synthvid.py --split test --count "$TEST_COUNT" --out "$DATA"
wait
$PY tools/synthvid/synthvid.py --split train --count "$TRAIN_COUNT" --out "$DATA" --merge 2

echo "[2/4] decode + preprocess -> $CACHE"
$N $PY tools/train/prepare_data.py --data "$DATA" --cache "$CACHE" --split train --shard 0/2 &
sleep 5
$N $PY tools/train/prepare_data.py --data "$DATA" --cache "$CACHE" --split train --shard 1/2 &
$N $PY tools/train/prepare_data.py --data "$DATA" --cache "$CACHE" --split val
wait

echo "[3/4] stage 1 (vision tower + projector alignment) then stage 2 (chat) -> $RUN, export -> $EXPORT"
mkdir -p "$RUN"
rm -f "$RUN/stage1_log.jsonl"
# Stage 1 on (colour, shape) pairs keeps the binding; stage 2 adds the object-fact probes at
# decoder layer 2 (later appearances weighted in the count probe), the supervised retrieval head
# in layer 4 (not on count questions) and the word probes at its input (README.md, "Stage 2
# auxiliary losses").
$N $PY tools/train/pretrain_vision.py --cache "$CACHE" --out "$RUN/stage1.pt" \
  --log "$RUN/stage1_log.jsonl" --seed "$SEED" --steps "$STAGE1_STEPS" \
  --time-budget-min "$STAGE1_BUDGET_MIN" --targets pairs
$N $PY tools/train/train.py --cache "$CACHE" --out "$RUN" --export "$EXPORT" --seed "$SEED" \
  --init "$RUN/stage1.pt" --prepend-log "$RUN/stage1_log.jsonl" \
  --time-budget-min "$TIME_BUDGET_MIN" --max-steps "$MAX_STEPS" \
  --facts-weight 0.3 --facts-layers 2 --count-2plus-weight 4 \
  --retrieval-weight 0.3 --retrieval-layer 4 --retrieval-skip-count 1 --word-probe-weight 0.3

echo "[4/4] evaluate the exported model on the test split (HF processor + generate)"
$N $PY tools/train/evaluate.py --model "$EXPORT" --data "$DATA" --split test \
  --out "$EXPORT/eval_test.json" --turn2
