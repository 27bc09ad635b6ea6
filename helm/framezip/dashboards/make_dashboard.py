#!/usr/bin/env python3
"""Writes framezip.json, the framezip Grafana dashboard, beside this file.

    python3 helm/framezip/dashboards/make_dashboard.py          # rewrite framezip.json
    python3 helm/framezip/dashboards/make_dashboard.py --check  # exit 1 if framezip.json is stale

The dashboard is built here so that every panel follows the same conventions (one datasource
variable, the namespace and model_name filters, $__rate_interval) and so that the tests can
list its queries; the JSON is what Grafana loads (the chart ships it in a ConfigMap for the
Grafana sidecar; it can also be imported by itself). tests/deploy/test_prometheus_queries.py
runs every query against a real server and KV store.

Series (server/metrics.h, kvstore/prometheus_metrics.cc): the server's all carry model_name; the
KV store daemon's carry none. framezip_kv_bytes and framezip_kv_restore_seconds exist in both,
so the panels tell them apart with model_name!="" (server) and model_name="" (KV store).
Nothing here depends on the job label, so annotation-based scraping works too.
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "framezip.json")

DS = {"type": "prometheus", "uid": "${datasource}"}
NS = 'namespace=~"$namespace"'
SRV = f'{NS}, model_name=~"$model_name", model_name!=""'  # framezip-server series
KVS = f'{NS}, model_name=""'                               # framezip-kvstore series
RI = "$__rate_interval"
SERVER_ERRORS = "INTERNAL|UNKNOWN|UNAVAILABLE|DEADLINE_EXCEEDED|DATA_LOSS|RESOURCE_EXHAUSTED"


def quantiles(metric, selector, qs=(0.5, 0.9, 0.99), by=""):
    """histogram_quantile targets of a histogram, one per quantile."""
    group = f"le, {by}" if by else "le"
    legend_by = f" {{{{{by}}}}}" if by else ""
    return [(f"histogram_quantile({q}, sum by ({group}) "
             f"(rate({metric}_bucket{{{selector}}}[{RI}])))", f"p{int(q * 100)}{legend_by}")
            for q in qs]


def mean(metric, selector, legend="mean"):
    return (f"sum(rate({metric}_sum{{{selector}}}[{RI}])) / "
            f"sum(rate({metric}_count{{{selector}}}[{RI}]))", legend)


# (row title, [panel, ...]); a panel is (type, title, unit, description, [(expr, legend), ...]).
ROWS = [
    ("Overview", [
        ("stat", "Requests/s", "reqps", "All RPCs, every status.",
         [(f"sum(rate(framezip_requests_total{{{SRV}}}[{RI}]))", "requests/s")]),
        ("stat", "Server error ratio", "percentunit",
         f"RPCs ending {SERVER_ERRORS.replace('|', ', ')} over all RPCs (the "
         "FramezipHighErrorRate alert fires above 5 %).",
         [(f'sum(rate(framezip_requests_total{{{SRV}, code=~"{SERVER_ERRORS}"}}[{RI}])) / '
           f"sum(rate(framezip_requests_total{{{SRV}}}[{RI}]))", "server errors")]),
        ("stat", "TTFT p99", "s", "Time to first token, 99th percentile.",
         quantiles("framezip_time_to_first_token_seconds", SRV, (0.99,))),
        ("stat", "Running", "short", "Turns in the engines' batches.",
         [(f"sum(framezip_num_requests_running{{{SRV}}})", "running")]),
        ("stat", "Waiting", "short",
         "Turns being prepared or waiting for KV room (the autoscaling signal).",
         [(f"sum(framezip_num_requests_waiting{{{SRV}}})", "waiting")]),
        ("stat", "Servers with their KV store up", "short",
         "Server pods whose session KV store serves (framezip_kv_store_up), of all server pods "
         "that report one.",
         [(f"sum(framezip_kv_store_up{{{SRV}}})", "up"),
          (f"count(framezip_kv_store_up{{{SRV}}})", "of")]),
    ]),
    ("Requests", [
        ("timeseries", "Request rate by RPC and status", "reqps",
         "framezip_requests_total: every RPC by method and gRPC status code.",
         [(f"sum by (rpc, code) (rate(framezip_requests_total{{{SRV}}}[{RI}]))",
           "{{rpc}} {{code}}")]),
        ("timeseries", "Errors by status", "reqps",
         "RPCs that did not end OK, by status code and method (callers' errors such as "
         "NOT_FOUND included).",
         [(f'sum by (code, rpc) (rate(framezip_requests_total{{{SRV}, code!="OK"}}[{RI}]))',
           "{{code}} {{rpc}}")]),
        ("timeseries", "Running and waiting requests", "short",
         "Per server pod: turns in the batch and turns waiting for admission.",
         [(f"sum by (pod) (framezip_num_requests_running{{{SRV}}})", "running {{pod}}"),
          (f"sum by (pod) (framezip_num_requests_waiting{{{SRV}}})", "waiting {{pod}}")]),
        ("timeseries", "Queue time", "s",
         "Arrival to admission into the batch (preparing media and waiting for KV room).",
         quantiles("framezip_request_queue_time_seconds", SRV)),
    ]),
    ("Latency", [
        ("timeseries", "Time to first token", "s", "From a turn's arrival to its first token.",
         quantiles("framezip_time_to_first_token_seconds", SRV)),
        ("timeseries", "Inter-token latency", "s",
         "Time between consecutive generated tokens (token-weighted).",
         quantiles("framezip_inter_token_latency_seconds", SRV)),
        ("timeseries", "End-to-end turn latency", "s", "Arrival to the last token or the failure.",
         quantiles("framezip_e2e_request_latency_seconds", SRV)),
    ]),
    ("Throughput and media", [
        ("timeseries", "Tokens/s", "short",
         "Prompt tokens of finished turns and generated tokens, per second.",
         [(f"sum(rate(framezip_prompt_tokens_total{{{SRV}}}[{RI}]))", "prompt"),
          (f"sum(rate(framezip_generation_tokens_total{{{SRV}}}[{RI}]))", "generated")]),
        ("timeseries", "Prefix cache hit rate", "percentunit",
         "Prompt tokens whose KV was reused (engine memory or restored from the store) over all "
         "prompt tokens looked up.",
         [(f"sum(rate(framezip_prefix_cache_hits_total{{{SRV}}}[{RI}])) / "
           f"sum(rate(framezip_prefix_cache_queries_total{{{SRV}}}[{RI}]))", "hit rate")]),
        ("timeseries", "Visual tokens", "short",
         "Visual tokens of prompts per second, before and after pruning.",
         [(f"sum by (stage) (rate(framezip_visual_tokens_total{{{SRV}}}[{RI}]))", "{{stage}}")]),
        ("timeseries", "Frames sampled", "short", "Video frames planned for the model per second.",
         [(f"sum(rate(framezip_frames_sampled_total{{{SRV}}}[{RI}]))", "frames/s")]),
        ("timeseries", "Media decode time", "s",
         "Upload probing and per-turn frame decoding (in the sandboxed media workers).",
         quantiles("framezip_media_decode_seconds", SRV, (0.5, 0.95))),
        ("timeseries", "Vision encode time", "s",
         "Vision tower and projector per turn with new media.",
         quantiles("framezip_vision_encode_seconds", SRV, (0.5, 0.95))),
        ("timeseries", "Upload buffer", "bytes",
         "Bytes reserved by uploads in progress, per server pod (--max-upload-buffer-bytes).",
         [(f"sum by (pod) (framezip_upload_buffer_bytes{{{SRV}}})", "{{pod}}")]),
    ]),
    ("KV cache and compression", [
        ("timeseries", "Engine KV cache usage", "percentunit",
         "Engine KV memory in use over its budget (--kv-budget-bytes), per server pod.",
         [(f"max by (pod) (framezip_kv_cache_usage_ratio{{{SRV}}})", "{{pod}}")]),
        ("timeseries", "Session KV bytes by tier and format", "bytes",
         "KV the sessions hold, by where it is (device = engine memory, or the store tier) and "
         "its format (f16, int4, int2).",
         [(f"sum by (tier, precision) (framezip_kv_bytes{{{SRV}}})", "{{tier}} {{precision}}")]),
        ("timeseries", "Compression ratio", "short",
         "f16-equivalent over stored KV bytes of a session after each turn. The metric has no "
         "policy label: it covers the sessions' policies together (the server's default_policy "
         "for sessions that ask for none).",
         [mean("framezip_kv_compression_ratio", SRV)]
         + quantiles("framezip_kv_compression_ratio", SRV, (0.5,))),
        ("timeseries", "Kept token ratio (ZipVL)", "percentunit",
         "Mean fraction of tokens ZipVL kept as important in a turn (turns under zipvl only; no "
         "policy label).",
         [mean("framezip_important_token_ratio", SRV)]
         + quantiles("framezip_important_token_ratio", SRV, (0.5,))),
        ("timeseries", "KV restore time by tier", "s",
         "Time a turn spent restoring its session's cached prefix, by the tier it came from "
         "(device: still in engine memory).",
         quantiles("framezip_kv_restore_seconds", SRV, (0.5, 0.95), by="tier")),
    ]),
    ("KV store", [
        ("timeseries", "KV store bytes by tier and format", "bytes",
         "Blocks resident in framezip-kvstore's tiers, by precision.",
         [(f"sum by (tier, precision) (framezip_kv_bytes{{{KVS}}})", "{{tier}} {{precision}}")]),
        ("timeseries", "KV store tier usage", "percentunit",
         "Resident bytes over capacity of each tier that has one (host, disk).",
         [(f"sum by (tier) (framezip_kv_bytes{{{KVS}}}) / "
           f"sum by (tier) (framezip_kv_capacity_bytes{{{NS}}} > 0)", "{{tier}}")]),
        ("timeseries", "KV store hit rate by tier", "percentunit",
         "Block reads a tier served over the reads it was asked (no line while a tier has no "
         "reads).",
         [(f"sum by (tier) (rate(framezip_kv_hits_total{{{NS}}}[{RI}])) / "
           f"(sum by (tier) (rate(framezip_kv_hits_total{{{NS}}}[{RI}])) + "
           f"sum by (tier) (rate(framezip_kv_misses_total{{{NS}}}[{RI}])))", "{{tier}}")]),
        ("timeseries", "KV store block restore time", "s",
         "Time to read one KV block back from a framezip-kvstore tier.",
         quantiles("framezip_kv_restore_seconds", KVS, (0.5, 0.95), by="tier")),
        ("timeseries", "KV store health", "short",
         "framezip_kv_store_up per server pod (its store reachable, every tier up, last commit "
         "ok) and framezip_kv_tier_available per KV store tier (tiers never configured read 0).",
         [(f"min by (pod) (framezip_kv_store_up{{{SRV}}})", "store up {{pod}}"),
          (f"max by (tier) (framezip_kv_tier_available{{{NS}}})", "tier {{tier}}")]),
        ("timeseries", "KV writes and commits", "ops",
         "Failed block writes per tier in framezip-kvstore, and session KV commits by result.",
         [(f"sum by (tier) (rate(framezip_kv_write_failures_total{{{NS}}}[{RI}]))",
           "write failures {{tier}}"),
          (f"sum by (result) (rate(framezip_kv_store_commits_total{{{SRV}}}[{RI}]))",
           "commits {{result}}")]),
    ]),
]


def panel_json(panel_id, kind, title, unit, description, targets, grid):
    p = {
        "id": panel_id,
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DS,
        "gridPos": grid,
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [
            {"datasource": DS, "expr": expr, "legendFormat": legend, "refId": chr(ord("A") + i),
             "range": True}
            for i, (expr, legend) in enumerate(targets)
        ],
    }
    if kind == "stat":
        p["options"] = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                        "colorMode": "value", "graphMode": "area", "textMode": "auto"}
    else:
        p["fieldConfig"]["defaults"]["custom"] = {"drawStyle": "line", "lineWidth": 1,
                                                  "fillOpacity": 10, "showPoints": "never",
                                                  "spanNulls": True}
        p["options"] = {"legend": {"displayMode": "list", "placement": "bottom",
                                   "showLegend": True},
                        "tooltip": {"mode": "multi", "sort": "desc"}}
    return p


def variable(name, label, query):
    return {
        "name": name, "label": label, "type": "query", "datasource": DS,
        "query": {"query": query, "refId": name}, "definition": query,
        "refresh": 2, "includeAll": True, "multi": True, "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "sort": 1, "hide": 0,
    }


def build():
    panels = []
    next_id = 1
    y = 0
    for row_title, row_panels in ROWS:
        panels.append({"id": next_id, "type": "row", "title": row_title, "collapsed": False,
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []})
        next_id += 1
        y += 1
        stat_row = all(p[0] == "stat" for p in row_panels)
        width, height = (4, 4) if stat_row else (8, 8)
        x = 0
        for kind, title, unit, description, targets in row_panels:
            if x + width > 24:
                x = 0
                y += height
            panels.append(panel_json(next_id, kind, title, unit, description, targets,
                                     {"h": height, "w": width, "x": x, "y": y}))
            next_id += 1
            x += width
        y += height
    return {
        "uid": "framezip",
        "title": "framezip",
        "description": "framezip-server and framezip-kvstore: requests, latency, throughput, "
                       "media, KV cache, compression and the session KV store.",
        "tags": ["framezip", "inference", "grpc"],
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "schemaVersion": 39,
        "time": {"from": "now-1h", "to": "now"},
        "timezone": "",
        "version": 1,
        "links": [],
        "annotations": {"list": []},
        "templating": {"list": [
            {"name": "datasource", "label": "Prometheus", "type": "datasource",
             "query": "prometheus", "current": {}, "hide": 0, "refresh": 1, "regex": ""},
            variable("namespace", "Namespace",
                     "label_values(framezip_num_requests_running, namespace)"),
            variable("model_name", "Model",
                     'label_values(framezip_num_requests_running{namespace=~"$namespace"}, '
                     "model_name)"),
        ]},
        "panels": panels,
    }


def render():
    return json.dumps(build(), indent=2, sort_keys=False) + "\n"


def main():
    text = render()
    if "--check" in sys.argv[1:]:
        with open(OUT) as f:
            if f.read() != text:
                sys.exit(f"{OUT} is stale: run {os.path.relpath(__file__)}")
        return
    with open(OUT, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
