#!/usr/bin/env python3
"""The dashboard's and the alert rules' PromQL against real data, through Debian's Prometheus.

1. `promtool check rules` on helm/framezip/rules/framezip-alerts.yaml, and `promtool test rules`
   on tests/deploy/framezip-alerts.test.yaml (every alert fires on the series it should, with its
   labels and text, and not on the others).
2. Starts a real redis-server, framezip-kvstore (host, disk and Redis tiers) and framezip-server
   (the shipped model, a KV budget small enough that sessions are evicted and restored) on
   loopback, and a Prometheus scraping both every second with the rules file loaded, under the
   job names the chart's ServiceMonitor gives them (framezip-server, framezip-kvstore) and the
   namespace and pod labels the Prometheus Operator adds.
3. Drives a short load (tests/deploy/framezip_load.py: 4 sessions with a video, 3 turns each,
   two NOT_FOUND and two RESOURCE_EXHAUSTED), then evaluates every query of every dashboard panel
   through Prometheus' HTTP API: each must parse and return at least one finite value, above
   zero unless the panel shows something that is zero at rest (turns in flight). The
   dashboard's variable queries must list the namespace and the model. Every alert expression
   must evaluate, return nothing while all is well (the error rate excepted: the load fails on
   purpose), every series it selects must have data, and Prometheus must report every rule
   healthy.
4. Faults, each checked by the alert expressions that must now return data: Redis killed and
   the load run again (FramezipKvStoreTierUnavailable, FramezipKvStoreWriteFailures,
   FramezipKvStoreDegraded), a burst of turns too big for the KV budget (FramezipHighErrorRate),
   24 callers queueing at a server that runs one turn at a time (FramezipQueueGrowing),
   the KV store killed (FramezipTargetDown; a turn still succeeds and its commit fails:
   FramezipKvCommitFailures, FramezipSessionsNotDurable), the server drained with SIGTERM (exit 0, then
   FramezipNoServerServing). FramezipTtftP99High needs turns queued for more than 10 s, more
   than the server's wait queue holds of this model's short turns; promtool's unit tests cover
   it.

Prints one line per query and ends with "N passed, N failed". Without prometheus, promtool,
redis-server, ffmpeg or Debian's python3-grpcio it prints "SKIPPED: <reason>" and exits 0
(scripts/install-deps.sh installs them all).
"""

import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import Checks  # noqa: E402  (tests/deploy/checks.py)
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("FRAMEZIP_SOURCE_DIR", os.path.normpath(os.path.join(HERE, "..", "..")))
BINARY_DIR = os.environ.get("FRAMEZIP_BINARY_DIR", os.path.join(SOURCE_DIR, "build"))
CHART = os.path.join(SOURCE_DIR, "helm", "framezip")
RULES = os.path.join(CHART, "rules", "framezip-alerts.yaml")
RULES_TEST = os.path.join(HERE, "framezip-alerts.test.yaml")
DASHBOARD = os.path.join(CHART, "dashboards", "framezip.json")
MODEL = os.path.join(SOURCE_DIR, "models", "framezip-tiny-video")
NAMESPACE = "framezip-test"
MODEL_NAME = "framezip-tiny-video"
RATE_INTERVAL = "1m"  # what Grafana's $__rate_interval is at these scrape intervals and ranges




def skip(reason):
    print(f"SKIPPED: {reason}")
    sys.exit(0)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout, interval=0.2):
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > end:
            return value
        time.sleep(interval)


def read_port(path, timeout=30):
    def ready():
        try:
            with open(path) as f:
                text = f.read().strip()
            return int(text) if text else None
        except (OSError, ValueError):
            return None
    return wait_for(ready, timeout)


class Processes:
    """Children started by this test; all stopped at the end."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.procs = {}

    def start(self, name, argv):
        log = open(os.path.join(self.tmp, f"{name}.log"), "w")
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL)
        return self.procs[name]

    def log_tail(self, name, lines=30):
        try:
            with open(os.path.join(self.tmp, f"{name}.log")) as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def stop_all(self):
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


class Prometheus:
    def __init__(self, port):
        self.base = f"http://127.0.0.1:{port}"

    def get(self, path, **params):
        url = f"{self.base}{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params, doseq=True)
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:  # 400/422: the body says why (bad_data, ...)
            return json.loads(e.read())

    def query(self, expr):
        return self.get("/api/v1/query", query=expr)

    def ready(self):
        try:
            with urllib.request.urlopen(f"{self.base}/-/ready", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False


# Panels whose every value may be 0 after the load: gauges of turns and uploads in flight, and
# failed KV writes (none before the faults).
ZERO_AT_REST = {("Running", "A"), ("Waiting", "A"), ("Running and waiting requests", "A"),
                ("Running and waiting requests", "B"), ("Upload buffer", "A"),
                ("KV writes and commits", "A")}


def finite_values(result):
    values = []
    for sample in result.get("data", {}).get("result", []):
        v = float(sample["value"][1])
        if math.isfinite(v):
            values.append(v)
    return values


def describe(result):
    data = result.get("data", {}).get("result", [])
    finite = finite_values(result)
    shown = ", ".join(f"{v:.4g}" for v in finite[:4]) + (" ..." if len(finite) > 4 else "")
    return f"{len(data)} series, {len(finite)} finite ({shown})"


def dashboard_queries():
    with open(DASHBOARD) as f:
        dashboard = json.load(f)
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield panel["title"], target["refId"], target["expr"]


def substitute(expr):
    return (expr.replace("$__rate_interval", RATE_INTERVAL)
                .replace("$namespace", NAMESPACE)
                .replace("$model_name", MODEL_NAME))


SELECTOR = re.compile(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}")


def selectors(expr):
    return sorted({f"{m.group(1)}{{{m.group(2)}}}" for m in SELECTOR.finditer(expr)})


def main():
    for tool in ("prometheus", "promtool", "redis-server", "ffmpeg"):
        if shutil.which(tool) is None:
            skip(f"{tool} is not installed (scripts/install-deps.sh installs it)")
    try:
        import grpc  # noqa: F401
        import google.protobuf  # noqa: F401
    except ImportError:
        skip(f"{sys.executable} has no grpcio/protobuf (Debian: python3-grpcio python3-protobuf, "
             "installed by scripts/install-deps.sh)")
    for binary in ("framezip-server", "framezip-kvstore", "framezip-media-worker"):
        if not os.path.exists(os.path.join(BINARY_DIR, "bin", binary)):
            print(f"FAIL {binary} is not built in {BINARY_DIR}/bin")
            sys.exit(1)
    sys.path.insert(0, HERE)
    import framezip_load

    f = Checks()
    tmp = tempfile.mkdtemp(prefix="framezip-prom-")
    procs = Processes(tmp)
    try:
        run(f, tmp, procs, framezip_load)
    finally:
        procs.stop_all()
        if f.failed:
            for name in procs.procs:
                print(f"--- {name}.log (tail)\n{procs.log_tail(name)}")
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{f.passed} passed, {len(f.failed)} failed")
    sys.exit(1 if f.failed else 0)


def run(f, tmp, procs, framezip_load):
    # 1. The rules file, by promtool.
    out = subprocess.run(["promtool", "check", "rules", RULES], capture_output=True, text=True)
    f.check(out.returncode == 0, "promtool check rules", (out.stdout + out.stderr).strip())
    out = subprocess.run(["promtool", "test", "rules", os.path.basename(RULES_TEST)], cwd=HERE,
                         capture_output=True, text=True)
    f.check(out.returncode == 0, "promtool test rules", (out.stdout + out.stderr).strip())

    # 2. Redis, framezip-kvstore, framezip-server.
    bin_dir = os.path.join(BINARY_DIR, "bin")
    redis_port = free_port()
    redis = procs.start("redis", ["redis-server", "--port", str(redis_port), "--bind",
                                  "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", tmp])
    kvstore = procs.start("kvstore", [
        os.path.join(bin_dir, "framezip-kvstore"), "--listen", "127.0.0.1:0",
        "--port-file", os.path.join(tmp, "kv.port"), "--metrics-listen", "127.0.0.1:0",
        "--metrics-port-file", os.path.join(tmp, "kv-metrics.port"),
        "--kv-host-bytes", str(1 << 20), "--kv-disk-path", os.path.join(tmp, "kv"),
        "--kv-redis", f"127.0.0.1:{redis_port}"])
    kv_port = read_port(os.path.join(tmp, "kv.port"))
    kv_metrics_port = read_port(os.path.join(tmp, "kv-metrics.port"))
    if not f.check(bool(kv_port and kv_metrics_port), "framezip-kvstore started",
                   f"gRPC {kv_port}, metrics {kv_metrics_port}"):
        return
    server = procs.start("server", [
        os.path.join(bin_dir, "framezip-server"), "--model", MODEL, "--listen", "127.0.0.1:0",
        "--port-file", os.path.join(tmp, "server.port"), "--metrics-listen", "127.0.0.1:0",
        "--metrics-port-file", os.path.join(tmp, "server-metrics.port"),
        "--kvstore", f"127.0.0.1:{kv_port}", "--kv-budget-bytes", str(400 << 10),
        "--max-running", "1", "--default-policy", "zipvl", "--housekeeping-ms", "200",
        "--grace-seconds", "5", "--media-dir", os.path.join(tmp, "media")])
    server_port = read_port(os.path.join(tmp, "server.port"))
    server_metrics_port = read_port(os.path.join(tmp, "server-metrics.port"))
    if not f.check(bool(server_port and server_metrics_port), "framezip-server started",
                   f"gRPC {server_port}, metrics {server_metrics_port}"):
        return

    # Prometheus, scraping both every second under the ServiceMonitor's job names.
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s",
                   "evaluation_interval": "1s"},
        "rule_files": [RULES],
        "scrape_configs": [
            {"job_name": "framezip-server", "static_configs": [{
                "targets": [f"127.0.0.1:{server_metrics_port}"],
                "labels": {"namespace": NAMESPACE, "pod": "framezip-6d9c-x2k4p"}}]},
            {"job_name": "framezip-kvstore", "static_configs": [{
                "targets": [f"127.0.0.1:{kv_metrics_port}"],
                "labels": {"namespace": NAMESPACE, "pod": "framezip-kvstore-0"}}]},
        ],
    }
    config_path = os.path.join(tmp, "prometheus.yml")
    with open(config_path, "w") as cf:
        json.dump(config, cf)  # JSON is YAML
    out = subprocess.run(["promtool", "check", "config", config_path], capture_output=True,
                         text=True)
    f.check(out.returncode == 0, "promtool check config (with the rules file)",
            out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr.strip())
    prom = None
    for attempt in range(3):
        port = free_port()
        procs.start("prometheus", [
            "prometheus", f"--config.file={config_path}",
            f"--storage.tsdb.path={os.path.join(tmp, f'tsdb{attempt}')}",
            f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"])
        candidate = Prometheus(port)
        if wait_for(candidate.ready, 30) and procs.procs["prometheus"].poll() is None:
            prom = candidate
            break
        procs.procs["prometheus"].kill()
        procs.procs["prometheus"].wait()
    if not f.check(prom is not None, "prometheus started"):
        return

    def has_data(expr):
        r = prom.query(expr)
        return r if r.get("status") == "success" and r["data"]["result"] else None

    f.check(bool(wait_for(lambda: has_data('up{job="framezip-server"} == 1') and
                          has_data('up{job="framezip-kvstore"} == 1'), 30)),
            "both targets up in Prometheus")

    # 3. The load, then a few scrapes so its effects are in.
    clip = os.path.join(tmp, "clip.mp4")
    subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                    "testsrc=size=64x48:rate=10:duration=1", "-pix_fmt", "yuv420p", "-c:v",
                    "libx264", clip], check=True)
    address = f"127.0.0.1:{server_port}"
    summary = framezip_load.run_load(address, clip, pause_seconds=3)
    f.check(summary["turns"].get("OK", 0) == 12 and summary["restored"] > 0 and
            summary["turns"].get("NOT_FOUND") == 2 and
            summary["turns"].get("RESOURCE_EXHAUSTED") == 2,
            "load: 12 turns OK (some restored from the KV store), 2 NOT_FOUND, "
            "2 RESOURCE_EXHAUSTED",
            json.dumps(summary))
    wait_for(lambda: has_data('framezip_kv_restore_seconds_count{job="framezip-kvstore"} > 0')
             and has_data('framezip_requests_total{code="RESOURCE_EXHAUSTED"} > 0'), 15)
    time.sleep(3)

    print("--- dashboard panels")
    for title, ref, expr in dashboard_queries():
        r = prom.query(substitute(expr))
        values = finite_values(r) if r.get("status") == "success" else []
        # Data, and more than zeros where the load must have moved it (gauges of turns in flight
        # and failure counters read 0 at rest).
        ok = bool(values) and (max(values) > 0 or (title, ref) in ZERO_AT_REST)
        f.check(ok, f"panel '{title}' {ref}",
                describe(r) if r.get("status") == "success" else f"{r.get('errorType')}: "
                f"{r.get('error')} in {substitute(expr)}")
    # The dashboard's variables (label_values(...)): Prometheus' label values API.
    for label, match, want in (
            ("namespace", "framezip_num_requests_running", NAMESPACE),
            ("model_name", f'framezip_num_requests_running{{namespace=~"{NAMESPACE}"}}',
             MODEL_NAME)):
        r = prom.get(f"/api/v1/label/{label}/values", **{"match[]": match})
        f.check(want in r.get("data", []), f"variable ${label}", f"{r.get('data')}")

    print("--- alert rules")
    # The rules as Prometheus loaded them from the rules file (name, expression).
    groups = prom.get("/api/v1/rules").get("data", {}).get("groups", [])
    alerts = [(r["name"], r["query"]) for g in groups for r in g["rules"]
              if r["type"] == "alerting"]
    f.check(len(alerts) == 10, "Prometheus loaded the 10 alerts of the rules file",
            ", ".join(n for n, _ in alerts))
    for name, expr in alerts:
        # Nothing is wrong yet, so nothing may fire (the unconfigured "remote" tier reads 0 and
        # must not count as down), except the error rate: the load failed 2 turns with
        # RESOURCE_EXHAUSTED on purpose. Three tries a second apart: one scrape that a busy
        # machine answered late is not an alert (the rules' `for` says the same).
        for _ in range(3):
            r = prom.query(expr)
            quiet = r.get("status") == "success" and (
                name == "FramezipHighErrorRate" or not r["data"]["result"])
            if quiet or r.get("status") != "success":
                break
            time.sleep(1)
        f.check(quiet, f"alert {name} evaluates" + (
            "" if name == "FramezipHighErrorRate" else " and is quiet while all is well"),
                f"{len(r['data']['result'])} series now" if r.get("status") == "success"
                else f"{r.get('errorType')}: {r.get('error')}")
        for sel in selectors(expr):
            r = prom.query(sel)
            f.check(r.get("status") == "success" and bool(r["data"]["result"]),
                    f"alert {name} reads {sel}", describe(r))
    groups = prom.get("/api/v1/rules").get("data", {}).get("groups", [])
    loaded = [rule for group in groups for rule in group["rules"]]
    unhealthy = [(rule["name"], rule.get("lastError")) for rule in loaded
                 if rule.get("health") != "ok"]
    f.check(len(loaded) == 10 and not unhealthy, "Prometheus evaluates every rule",
            f"{len(loaded)} rules, unhealthy: {unhealthy}")

    # 4. Faults.
    print("--- faults")
    expr_of = dict(alerts)

    def fires(name, timeout=20):
        r = wait_for(lambda: has_data(expr_of[name]), timeout, interval=0.5)
        return f.check(bool(r), f"alert {name} fires", describe(r) if r else "no data")

    # Overload: turns too big for the KV budget get RESOURCE_EXHAUSTED.
    framezip_load.overload(address, clip, turns=12)
    fires("FramezipHighErrorRate")
    # A queue: 24 callers of stateless 256-token turns against a server that runs one turn at a
    # time, for 12 s (after the error-rate alert, whose ratio its OK turns would dilute; before
    # the faults, so the server and its store are as they are in service). The alert is watched
    # from when the callers start, not from when their stubs are being generated: on a busy
    # machine protoc alone can take most of the burst's first seconds.
    burst = {}
    burst_started = threading.Event()
    caller = threading.Thread(target=lambda: burst.update(framezip_load.queue_burst(
        address, clients=24, seconds=12, started=burst_started)))
    caller.start()
    f.check(burst_started.wait(timeout=60), "the queue burst's callers start")
    fires("FramezipQueueGrowing", timeout=11)
    caller.join()
    # The deepest queue Prometheus saw, so a miss says by how much (the alert wants more than 8).
    peak = prom.query('max_over_time(framezip_num_requests_waiting{job="framezip-server"}[30s])')
    f.check(set(burst) == {"OK"}, "the queued turns all end OK",
            f"{json.dumps(burst)}, queue peaked at {describe(peak)}")

    redis.kill()
    redis.wait()
    # The load again: its commits hit the dead Redis tier.
    framezip_load.run_load(address, clip, log=lambda s: print(f"after Redis died: {s}"))
    fires("FramezipKvStoreTierUnavailable")
    fires("FramezipKvStoreWriteFailures")
    fires("FramezipKvStoreDegraded")
    kvstore.kill()
    kvstore.wait()
    fires("FramezipTargetDown")
    # A turn with the store gone: it succeeds, its KV commit fails.
    # (The session stays: its KV is in no store, FramezipSessionsNotDurable.)
    f.check(framezip_load.one_turn(address, clip, keep_session=True) == "OK",
            "a turn succeeds without the KV store")
    fires("FramezipKvCommitFailures")
    fires("FramezipSessionsNotDurable")
    server.send_signal(signal.SIGTERM)
    try:
        code = server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        code = None
    f.check(code == 0, "framezip-server drains on SIGTERM and exits 0", f"exit code {code}")
    fires("FramezipNoServerServing")


if __name__ == "__main__":
    main()
