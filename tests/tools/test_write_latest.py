#!/usr/bin/env python3
"""Tests of bench/gpu/write_latest.py, the GPU check's latest.json writer.

Run: /usr/bin/python3 tests/tools/test_write_latest.py. Prints one line per check and "N passed,
M failed"; exits 1 on a failure.

Checked: keys from a previous latest.json survive a merge, device and date are replaced, the
bench reports' figures land under the keys the GPU check promises (server_c16_over_c1 from the
all-running window, sessions_resident and sessions_decode_tok_s per policy and frame count), and
a missing report or a malformed --demo-right fails with a message naming it.
"""

import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WRITER = os.path.join(ROOT, "bench", "gpu", "write_latest.py")

passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    print(f"{'ok  ' if ok else 'FAIL'} {name}{'' if ok else ': ' + detail}")
    passed, failed = passed + ok, failed + (not ok)


def report(path, suite, results):
    with open(path, "w") as f:
        f.write("readable line: 1 x\n")
        f.write(json.dumps({"suite": suite, "machine": {},
                            "results": [{"name": n, "value": v, "unit": "u"}
                                        for n, v in results.items()]}) + "\n")


def run(*args):
    return subprocess.run([sys.executable, WRITER, *args], capture_output=True, text=True)


with tempfile.TemporaryDirectory() as d:
    base = os.path.join(d, "base.json")
    with open(base, "w") as f:
        json.dump({"device": "old", "date": "2000-01-01T00:00:00Z", "bench_gpu_x": 7}, f)
    server = os.path.join(d, "server.json")
    report(server, "server", {"decode_tok_s_c1": 10.0, "decode_tok_s_c16": 90.0,
                              "decode_tok_s_all_running_c1": 12.0,
                              "decode_tok_s_all_running_c16": 96.0})
    sessions = os.path.join(d, "sessions.json")
    report(sessions, "sessions", {"sessions_resident_none_f64": 12.0,
                                  "sessions_resident_kivi_f64": 36.0,
                                  "sessions_resident_none_f256": 3.0,
                                  "decode_tok_s_kivi_f64": 4.5,
                                  "turn2_ttft_p99_kivi_f64": 0.1})
    out = os.path.join(d, "latest.json")
    r = run(out, "--device", "NVIDIA H100", "--base", base, "--server-report", server,
            "--sessions-report", sessions, "--demo-right", "3/3", "--demo-turn2-ttft-ms", "4.5",
            "--sessions-kv-budget-mib", "64")
    check("writes latest.json", r.returncode == 0, r.stderr)
    j = json.load(open(out)) if r.returncode == 0 else {}
    check("keeps the base's other keys", j.get("bench_gpu_x") == 7, str(j))
    check("replaces device", j.get("device") == "NVIDIA H100", str(j.get("device")))
    check("replaces date", j.get("date", "2000").startswith("20") and
          not j.get("date", "").startswith("2000"), str(j.get("date")))
    check("c16 over c1 from the all-running window", abs(j.get("server_c16_over_c1", 0) - 8.0)
          < 1e-9, str(j.get("server_c16_over_c1")))
    check("demo figures", j.get("server_demo_right") == "3/3" and
          j.get("server_turn2_ttft_ms") == 4.5, str(j))
    check("sessions_resident per policy and frames",
          j.get("sessions_resident") == {"none": {"64": 12, "256": 3}, "kivi": {"64": 36}},
          str(j.get("sessions_resident")))
    check("sessions_decode_tok_s per policy and frames",
          j.get("sessions_decode_tok_s") == {"kivi": {"64": 4.5}},
          str(j.get("sessions_decode_tok_s")))
    check("sessions budget", j.get("sessions_kv_budget_mib") == 64, str(j))

    # A second run merges over the file it wrote: keys it does not produce stay.
    r = run(out, "--device", "NVIDIA H200", "--demo-right", "2/3")
    j = json.load(open(out)) if r.returncode == 0 else {}
    check("merges over OUT", j.get("server_demo_right") == "2/3" and
          j.get("sessions_resident", {}).get("kivi") == {"64": 36} and
          j.get("device") == "NVIDIA H200", str(j))

    r = run(out, "--device", "x", "--server-report", os.path.join(d, "missing.json"))
    check("a missing report names the file", r.returncode != 0 and "missing.json" in r.stderr,
          r.stderr)
    r = run(out, "--device", "x", "--demo-right", "three")
    check("a malformed --demo-right is refused", r.returncode != 0 and "--demo-right" in r.stderr,
          r.stderr)

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
