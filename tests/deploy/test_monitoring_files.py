#!/usr/bin/env python3
"""The chart's monitoring files and docs against the code, with nothing but the standard
library (never skipped):

- helm/framezip/dashboards/framezip.json is what make_dashboard.py writes (not edited by hand
  and forgotten), and is a loadable Grafana dashboard: unique panel ids, panels inside the
  24-column grid and not overlapping, every panel with a query and a unit, every query on the
  ${datasource} variable, the namespace and model_name variables defined.
- Every metric the dashboard and the alert rules read is one framezip-server
  (server/metrics.cc) or framezip-kvstore (kvstore/prometheus_metrics.cc) registers (histograms
  with their _bucket/_sum/_count series), or Prometheus' own `up`: no invented names.
- docs/deployment.md names every value of values.yaml (as a dotted path) and every alert.

Ends with "N passed, N failed".
"""

import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import Checks  # noqa: E402  (tests/deploy/checks.py)

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("FRAMEZIP_SOURCE_DIR", os.path.normpath(os.path.join(HERE, "..", "..")))
CHART = os.path.join(SOURCE_DIR, "helm", "framezip")




def registered_metrics():
    """name -> kind, from the C++ registrations."""
    metrics = {}
    for path in ("server/metrics.cc", "kvstore/prometheus_metrics.cc"):
        text = open(os.path.join(SOURCE_DIR, path)).read()
        for m in re.finditer(r'Build(Counter|Gauge|Histogram)\(\)\s*\.Name\("([a-z0-9_]+)"\)',
                             text):
            metrics[m.group(2)] = m.group(1).lower()
        # kvstore: counter("name", ...) is a BuildCounter helper.
        for m in re.finditer(r'counter\("([a-z0-9_]+)"', text):
            metrics[m.group(1)] = "counter"
    return metrics


def series_names(metrics):
    names = {"up"}
    for name, kind in metrics.items():
        if kind == "histogram":
            names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
        else:
            names.add(name)
    return names


PROMQL_WORDS = {
    "sum", "by", "rate", "increase", "histogram_quantile", "max", "min", "count", "avg",
    "max_over_time", "deriv", "and", "or", "unless", "on", "le", "without", "ignoring",
}


def metric_names_in(expr):
    """Metric names an expression selects: identifiers before a `{`, or framezip_* names."""
    expr = re.sub(r'"[^"]*"', '""', expr)  # label values are not names
    found = set(re.findall(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{", expr))
    found |= set(re.findall(r"\b(framezip_[a-z0-9_]+)\b", expr))
    return {n for n in found if n not in PROMQL_WORDS}


def alert_exprs():
    rules = []
    lines = open(os.path.join(CHART, "rules", "framezip-alerts.yaml")).read().splitlines()
    name = None
    for i, line in enumerate(lines):
        m = re.match(r"\s*- alert: (\S+)", line)
        if m:
            name = m.group(1)
        m = re.match(r"\s*expr: (.*)$", line)
        if name and m:
            if m.group(1).strip() not in ("|", ">", "|-", ">-"):  # one line
                rules.append((name, m.group(1).strip().strip("'\"")))
            else:  # a block, more indented than `expr:`
                indent = len(line) - len(line.lstrip()) + 1
                body = []
                for nxt in lines[i + 1:]:
                    if nxt.strip() and len(nxt) - len(nxt.lstrip()) < indent:
                        break
                    body.append(nxt.strip())
                rules.append((name, " ".join(body)))
            name = None
    return rules


def values_paths():
    """Dotted paths of values.yaml's keys down to the second level (server.grpcPort, ...)."""
    paths = []
    parent = None
    for line in open(os.path.join(CHART, "values.yaml")):
        m = re.match(r"^([A-Za-z][A-Za-z0-9]*):", line)
        if m:
            parent = m.group(1)
            paths.append(parent)
            continue
        m = re.match(r"^  ([A-Za-z][A-Za-z0-9]*):", line)
        if m and parent:
            paths.append(f"{parent}.{m.group(1)}")
    return paths


def main():
    c = Checks()
    gen = subprocess.run([sys.executable, os.path.join(CHART, "dashboards", "make_dashboard.py"),
                          "--check"], capture_output=True, text=True)
    c.check(gen.returncode == 0, "dashboards/framezip.json is what make_dashboard.py writes",
            gen.stderr.strip())

    with open(os.path.join(CHART, "dashboards", "framezip.json")) as f:
        dashboard = json.load(f)
    panels = dashboard["panels"]
    ids = [p["id"] for p in panels]
    c.check(len(ids) == len(set(ids)), "dashboard panel ids are unique", f"{len(ids)} panels")
    cells = {}
    overlaps = []
    for p in panels:
        g = p["gridPos"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                if (x, y) in cells:
                    overlaps.append((p["title"], cells[(x, y)]))
                cells[(x, y)] = p["title"]
    c.check(all(0 <= p["gridPos"]["x"] and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24
                for p in panels) and not overlaps,
            "dashboard panels fit the 24-column grid without overlapping", f"{set(overlaps)}")
    queries = [(p["title"], t) for p in panels if p["type"] != "row" for t in p["targets"]]
    bad = [p["title"] for p in panels if p["type"] != "row" and (
        not p.get("targets") or p["datasource"]["uid"] != "${datasource}" or
        not p["fieldConfig"]["defaults"].get("unit") or
        len({t["refId"] for t in p["targets"]}) != len(p["targets"]) or
        any(not t["expr"] or t["datasource"]["uid"] != "${datasource}" for t in p["targets"]))]
    c.check(not bad, "every panel has queries with refIds on ${datasource} and a unit",
            f"{len(queries)} queries" if not bad else f"bad: {bad}")
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    c.check(variables.get("datasource", {}).get("type") == "datasource" and
            {"namespace", "model_name"} <= set(variables) and dashboard.get("uid") == "framezip",
            "dashboard variables: datasource, namespace, model_name; uid framezip")

    metrics = registered_metrics()
    known = series_names(metrics)
    c.check(len(metrics) >= 30, "metrics registered by framezip-server and framezip-kvstore",
            f"{len(metrics)}")
    for title, target in queries:
        unknown = metric_names_in(target["expr"]) - known
        c.check(not unknown, f"panel '{title}' {target['refId']} reads registered metrics",
                f"unknown: {sorted(unknown)}" if unknown else
                ", ".join(sorted(metric_names_in(target["expr"]))))
    alerts = alert_exprs()
    c.check(len(alerts) == 10, "alert rules read", ", ".join(n for n, _ in alerts))
    for name, expr in alerts:
        unknown = metric_names_in(expr) - known
        c.check(not unknown, f"alert {name} reads registered metrics",
                f"unknown: {sorted(unknown)}" if unknown else
                ", ".join(sorted(metric_names_in(expr))))

    docs = open(os.path.join(SOURCE_DIR, "docs", "deployment.md")).read()
    missing = [p for p in values_paths() if f"`{p}" not in docs]
    c.check(not missing, "docs/deployment.md names every value", f"missing: {missing}" if missing
            else f"{len(values_paths())} values")
    missing = [n for n, _ in alerts if n not in docs]
    c.check(not missing, "docs/deployment.md names every alert", f"missing: {missing}")

    c.finish()


if __name__ == "__main__":
    main()
