#!/usr/bin/env python3
"""Merges a GPU check's serving figures into a latest.json (bench/gpu/latest.json's format).

The file is one JSON object: "device" and "date" say where and when the figures were last
measured, every other key is a figure. Keys this run does not produce are kept as they were;
keys it produces are replaced. Usage (scripts/gpu-check.sh's server stage):

  write_latest.py OUT.json --device "NVIDIA H100 ..." [--base bench/gpu/latest.json]
      [--server-report bench-server.json] [--sessions-report bench-sessions.json]
      [--demo-right 3/3] [--demo-turn2-ttft-ms 12.5] [--sessions-kv-budget-mib 64]

Keys written:
  server_demo_right      "R/N": the demo's questions answered right in one session
  server_turn2_ttft_ms   turn 2's time to first token in that session (KV of turn 1 reused)
  server_c16_over_c1     `framezip bench server`: aggregate decode tok/s at 16 sessions over 1
                         (all-running window where both levels have one, else the turn-2 phase)
  sessions_resident      {policy: {frames: sessions}} from `framezip bench sessions`
  sessions_decode_tok_s  {policy: {frames: tok/s}} from the same run
  sessions_kv_budget_mib the KV budget that run filled
Exit status 1 with a message naming the file when a report cannot be read.
"""
import argparse
import datetime
import json
import re
import sys


def results(path):
    """The {name: value} of a `framezip bench ... --json` report (its last JSON line)."""
    try:
        with open(path) as f:
            lines = [l for l in f.read().splitlines() if l.startswith("{")]
        report = json.loads(lines[-1])
        return {r["name"]: r["value"] for r in report["results"]}
    except (OSError, IndexError, KeyError, ValueError) as e:
        sys.exit(f"write_latest: cannot read a bench report from {path}: {e}")


def server_figures(values):
    out = {}
    for window in ("decode_tok_s_all_running_c{}", "decode_tok_s_c{}"):
        c1, c16 = values.get(window.format(1)), values.get(window.format(16))
        if c1 and c16:
            out["server_c16_over_c1"] = c16 / c1
            break
    return out


def sessions_figures(values):
    resident, decode = {}, {}
    for name, value in values.items():
        m = re.fullmatch(r"sessions_resident_(.+)_f(\d+)", name)
        if m:
            resident.setdefault(m.group(1), {})[m.group(2)] = int(value)
        m = re.fullmatch(r"decode_tok_s_(.+)_f(\d+)", name)
        if m:
            decode.setdefault(m.group(1), {})[m.group(2)] = value
    out = {}
    if resident:
        out["sessions_resident"] = resident
    if decode:
        out["sessions_decode_tok_s"] = decode
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--device", required=True)
    p.add_argument("--base", help="latest.json to start from (default: OUT itself if it exists)")
    p.add_argument("--server-report")
    p.add_argument("--sessions-report")
    p.add_argument("--demo-right")
    p.add_argument("--demo-turn2-ttft-ms", type=float)
    p.add_argument("--sessions-kv-budget-mib", type=float)
    args = p.parse_args()

    latest = {}
    for base in (args.base, args.out):
        if base:
            try:
                with open(base) as f:
                    latest = json.load(f)
                break
            except FileNotFoundError:
                continue
            except ValueError as e:
                sys.exit(f"write_latest: {base} is not a JSON object: {e}")
    if args.demo_right is not None:
        if not re.fullmatch(r"\d+/\d+", args.demo_right):
            sys.exit(f"write_latest: --demo-right must be R/N, got '{args.demo_right}'")
        latest["server_demo_right"] = args.demo_right
    if args.demo_turn2_ttft_ms is not None:
        latest["server_turn2_ttft_ms"] = args.demo_turn2_ttft_ms
    if args.server_report:
        latest.update(server_figures(results(args.server_report)))
    if args.sessions_report:
        latest.update(sessions_figures(results(args.sessions_report)))
        if args.sessions_kv_budget_mib is not None:
            latest["sessions_kv_budget_mib"] = args.sessions_kv_budget_mib
    latest["device"] = args.device
    latest["date"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    with open(args.out, "w") as f:
        json.dump(latest, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
