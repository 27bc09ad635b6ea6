#!/usr/bin/env python3
"""helm/framezip rendered and linted by Helm's own code, every object validated against the
Kubernetes API schemas, offline.

Helm: helm-python-sdk (helm_python: Helm v4's Go SDK in a shared library; no helm binary, no
cluster). Schemas: kubernetes-validate (the Kubernetes OpenAPI schemas it ships, strict: an
unknown field fails). Both pinned in tools/python/requirements-deploy.txt and installed into
.venv-deploy/ by `scripts/python-env.sh --deploy`, which this test runs first (quietly; a no-op
when the venv is there) and then re-runs itself with that venv's python.

For each value set (defaults; GPU with an external Redis, TLS, auth, a model PVC and
NetworkPolicies; CPU-only with the Prometheus Operator objects, the Grafana dashboard, an HPA
and the in-chart Redis; KEDA with an init-container model and the embedded store; an image-volume
model) it checks: the values pass values.schema.json, the chart renders, `helm lint --strict`
finds nothing, every object validates against Kubernetes 1.29 and 1.33 (the image-volume set
against 1.33 only: image volumes are newer), and what the set is for is really in the objects
(probes, drain, security context, GPU requests, Redis address, ...). ServiceMonitor,
PrometheusRule and ScaledObject are CRDs, not in the Kubernetes schemas: they are checked field
by field here (apiVersion, kind, required fields, and that the PrometheusRule carries exactly
the rules file and the ConfigMap exactly the dashboard). Values the chart must refuse are
refused with a message.

Without the packages (no network to install them) it prints "SKIPPED: <reason>" and exits 0.
Ends with "N passed, N failed".
"""

import json
import os
import shutil
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import Checks  # noqa: E402  (tests/deploy/checks.py)
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("FRAMEZIP_SOURCE_DIR", os.path.normpath(os.path.join(HERE, "..", "..")))
BINARY_DIR = os.environ.get("FRAMEZIP_BINARY_DIR", os.path.join(SOURCE_DIR, "build"))
CHART = os.path.join(SOURCE_DIR, "helm", "framezip")
VENV_PYTHON = os.path.join(SOURCE_DIR, ".venv-deploy", "bin", "python")
KUBE_VERSIONS = ("1.29.0", "1.33.0")
RELEASE, NAMESPACE = "fz", "ml"


def have_packages():
    try:
        import helm_python  # noqa: F401
        import kubernetes_validate  # noqa: F401
        import yaml  # noqa: F401
        return True
    except ImportError:
        return False


def ensure_packages():
    """Runs this test under .venv-deploy's python (made by scripts/python-env.sh --deploy)."""
    if have_packages():
        return
    if os.environ.get("FRAMEZIP_DEPLOY_REEXEC"):
        print(f"SKIPPED: {sys.executable} cannot import helm_python and kubernetes_validate")
        sys.exit(0)
    setup = subprocess.run([os.path.join(SOURCE_DIR, "scripts", "python-env.sh"), "--deploy"],
                           capture_output=True, text=True)
    if setup.returncode != 0 or not os.path.exists(VENV_PYTHON):
        reason = (setup.stdout + setup.stderr).strip().splitlines()
        print("SKIPPED: could not install tools/python/requirements-deploy.txt into .venv-deploy "
              f"({reason[-1] if reason else 'no output'})")
        sys.exit(0)
    env = dict(os.environ, FRAMEZIP_DEPLOY_REEXEC="1")
    os.execve(VENV_PYTHON, [VENV_PYTHON, os.path.abspath(__file__)] + sys.argv[1:], env)




# Value sets: (name, values, Kubernetes versions to validate against).
VALUE_SETS = [
    ("defaults", {}, KUBE_VERSIONS),
    ("gpu-external-redis", {
        "gpu": {"enabled": True, "count": 1, "runtimeClassName": "nvidia"},
        "server": {"replicaCount": 2, "device": "cuda", "openai": {"enabled": True},
                   "settings": {"max_running": 32, "kv_budget_bytes": 8589934592,
                                                   "default_policy": "zipvl"},
                   "mediaDir": {"claimName": "framezip-media"}},
        "redis": {"mode": "external", "external": {"address": "redis.cache.svc:6379"}},
        "model": {"source": "pvc", "pvc": {"claimName": "models"}, "dir": "llava-onevision-7b"},
        "auth": {"enabled": True, "existingSecret": "framezip-tokens"},
        "tls": {"enabled": True, "secretName": "framezip-tls"},
        "networkPolicy": {"enabled": True, "grpcFrom": [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "apps"}}}],
            "openaiFrom": [
                {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "web"}}}]},
    }, KUBE_VERSIONS),
    ("cpu-monitoring-hpa", {
        "gpu": {"enabled": False},
        "server": {"device": "cpu", "resources": {"requests": {"cpu": "8", "memory": "16Gi"},
                                                  "limits": {"memory": "24Gi"}}},
        "monitoring": {"serviceMonitor": {"enabled": True, "labels": {"release": "kps"}},
                       "prometheusRule": {"enabled": True, "labels": {"release": "kps"}},
                       "grafanaDashboard": {"enabled": True}},
        "autoscaling": {"enabled": True, "kind": "hpa", "minReplicas": 2, "maxReplicas": 8,
                        "targetWaitingPerPod": 4, "targetCPUUtilizationPercentage": 80},
        "redis": {"mode": "internal"},
        "networkPolicy": {"enabled": True, "metricsFrom": [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]},
    }, KUBE_VERSIONS),
    ("keda-initcontainer-embedded", {
        "kvstore": {"enabled": False},
        "model": {"source": "initContainer", "dir": "my-model", "initContainer": {
            "image": "amazon/aws-cli:2.17.0",
            "command": ["sh", "-c", "aws s3 sync s3://models/my-model \"$MODEL_DIR\""]}},
        "autoscaling": {"enabled": True, "kind": "keda", "maxReplicas": 6,
                        "keda": {
                            "serverAddress": "http://prometheus-operated.monitoring.svc:9090"}},
        "monitoring": {"prometheusRule": {
            "enabled": True, "disabledAlerts": ["FramezipTtftP99High"],
            "alertLabels": {"team": "video"},
            "extraGroups": [{"name": "framezip-custom", "rules": [{
                "alert": "FramezipTtftP99VeryHigh",
                "expr": "histogram_quantile(0.99, sum by (namespace, le) (rate("
                        "framezip_time_to_first_token_seconds_bucket[5m]))) > 30",
                "labels": {"severity": "critical"}}]}]}},
    }, KUBE_VERSIONS),
    ("image-volume-model", {
        "model": {"source": "imageVolume", "dir": "framezip-tiny-video",
                  "imageVolume": {"reference": "registry.example.com/models/tiny:1"}},
    }, ("1.33.0",)),
]

# Values the chart must refuse, and a piece of the message that says why.
BAD_VALUES = [
    ({"server": {"replicas": 2}}, "additional properties 'replicas' not allowed"),
    ({"redis": {"mode": "sentinel"}}, "value must be one of"),
    ({"server": {"device": "gpu"}}, "does not match pattern"),
    ({"redis": {"mode": "internal"}, "kvstore": {"enabled": False}}, "needs kvstore.enabled"),
    ({"redis": {"mode": "external"}}, "needs redis.external.address"),
    ({"model": {"source": "pvc"}}, "needs model.pvc.claimName"),
    ({"auth": {"enabled": True}}, "needs auth.existingSecret"),
    ({"tls": {"enabled": True}}, "needs tls.secretName"),
    ({"autoscaling": {"enabled": True, "kind": "keda"}}, "needs autoscaling.keda.serverAddress"),
]

CRDS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): ["endpoints", "selector"],
    ("monitoring.coreos.com/v1", "PrometheusRule"): ["groups"],
    ("keda.sh/v1alpha1", "ScaledObject"): ["scaleTargetRef", "triggers"],
}


def objects_of(rendered):
    import yaml
    objects = []
    for path, text in sorted(rendered.items()):
        if not path.endswith((".yaml", ".yml")):
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                objects.append((path, doc))
    return objects


def find(objects, kind, name=None):
    return [o for _, o in objects if o["kind"] == kind and
            (name is None or o["metadata"]["name"] == name)]


def container(deployment, name):
    return next(c for c in deployment["spec"]["template"]["spec"]["containers"]
                if c["name"] == name)


def check_crd(c, where, obj):
    import re
    key = (obj["apiVersion"], obj["kind"])
    spec = obj.get("spec", {})
    missing = [field for field in CRDS[key] if field not in spec]
    name_ok = bool(re.match(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", obj["metadata"].get("name", "")))
    labels_ok = all(isinstance(v, str) for v in obj["metadata"].get("labels", {}).values())
    extra = ""
    if obj["kind"] == "ServiceMonitor":
        eps = spec.get("endpoints", [])
        extra_ok = eps and all("port" in e and re.match(r"^\d+[smh]$", e.get("interval", "30s"))
                               for e in eps) and "matchLabels" in spec.get("selector", {})
        extra = "endpoints name a port, intervals are durations"
    elif obj["kind"] == "PrometheusRule":
        groups = spec.get("groups", [])
        extra_ok = groups and all(g.get("name") and g.get("rules") and all(
            ("alert" in r) != ("record" in r) and isinstance(r.get("expr"), str)
            for r in g["rules"]) for g in groups)
        extra = "every group named, every rule an alert or a record with an expr"
    else:
        triggers = spec.get("triggers", [])
        extra_ok = (spec["scaleTargetRef"].get("name") and triggers and
                    all(t.get("type") and isinstance(t.get("metadata"), dict) and
                        all(isinstance(v, str) for v in t["metadata"].values())
                        for t in triggers))
        extra = "target named, trigger metadata all strings"
    c.check(not missing and name_ok and labels_ok and bool(extra_ok),
            f"{where}: {obj['kind']}/{obj['metadata']['name']} (CRD, checked structurally)",
            f"missing {missing}" if missing else extra)


def validate_objects(c, set_name, objects, versions):
    import kubernetes_validate
    for version in versions:
        failures = []
        count = 0
        for path, obj in objects:
            if (obj["apiVersion"], obj["kind"]) in CRDS:
                continue
            count += 1
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                failures.append(f"{obj['kind']}/{obj['metadata']['name']} ({path}): "
                                f"{'.'.join(str(p) for p in e.path)}: {e.message}")
            except kubernetes_validate.SchemaNotFoundError as e:
                failures.append(e.message)
        c.check(not failures and count > 0,
                f"{set_name}: {count} objects valid against Kubernetes {version} (strict)",
                "; ".join(failures))
    for path, obj in objects:
        if (obj["apiVersion"], obj["kind"]) in CRDS:
            check_crd(c, set_name, obj)


def arg_value(args, flag):
    for a in args:
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def check_set(c, name, objects, notes):
    fullname = f"{RELEASE}-framezip"
    deployment = find(objects, "Deployment", fullname)
    if not c.check(len(deployment) == 1, f"{name}: one server Deployment"):
        return
    d = deployment[0]
    pod = d["spec"]["template"]["spec"]
    server = container(d, "framezip-server")
    args = server["args"]
    limits = server.get("resources", {}).get("limits", {})
    kinds = sorted({o["kind"] for _, o in objects})
    print(f"     {name}: {len(objects)} objects: {', '.join(kinds)}")

    # Everywhere: security, drain, writable paths, probes, PDB, Services.
    sc = server["securityContext"]
    c.check(pod["securityContext"]["runAsNonRoot"] and sc["readOnlyRootFilesystem"] and
            not sc["allowPrivilegeEscalation"] and sc["capabilities"]["drop"] == ["ALL"],
            f"{name}: server non-root, read-only root filesystem, no privilege escalation")
    mounts = {m["mountPath"]: m["name"] for m in server["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    media = arg_value(args, "--media-dir")
    c.check(media in mounts and ("emptyDir" in volumes[mounts[media]] or
                                 "persistentVolumeClaim" in volumes[mounts[media]]) and
            "emptyDir" in volumes[mounts["/tmp"]],
            f"{name}: --media-dir is mounted (emptyDir or a shared claim), /tmp an emptyDir", media)
    grace = int(arg_value(args, "--grace-seconds"))
    pre_stop = server["lifecycle"]["preStop"]["exec"]["command"]
    c.check(pod["terminationGracePeriodSeconds"] >= int(pre_stop[1]) + grace + 10,
            f"{name}: terminationGracePeriodSeconds covers preStop + --grace-seconds + flush",
            f"{pod['terminationGracePeriodSeconds']} s >= {pre_stop[1]} + {grace} + 10")
    openai = arg_value(args, "--openai-listen")
    if ("tls" in name or arg_value(args, "--tls-cert-file")) and openai:
        c.check(server["startupProbe"]["httpGet"]["path"] == "/ready" and
                server["readinessProbe"]["httpGet"]["path"] == "/ready" and
                server["livenessProbe"]["httpGet"]["path"] == "/health" and
                all(server[p]["httpGet"]["port"] == "http-openai"
                    for p in ("startupProbe", "readinessProbe", "livenessProbe")),
                f"{name}: TLS on and the OpenAI API on, so HTTP probes on its /ready and /health")
    elif "tls" in name or arg_value(args, "--tls-cert-file"):
        c.check(all("tcpSocket" in server[p] for p in ("startupProbe", "readinessProbe",
                                                       "livenessProbe")),
                f"{name}: TLS on, so TCP probes (the kubelet's gRPC probes speak no TLS)")
    else:
        c.check(server["startupProbe"]["grpc"]["service"] == "framezip.v1.VideoChat" and
                server["readinessProbe"]["grpc"]["service"] == "framezip.v1.VideoChat" and
                server["livenessProbe"]["grpc"]["service"] == "",
                f"{name}: gRPC probes: startup/readiness on framezip.v1.VideoChat, liveness on ''")
    c.check(len(find(objects, "PodDisruptionBudget")) == 1, f"{name}: PodDisruptionBudget")
    services = {s["metadata"]["name"]: s for s in find(objects, "Service")}
    c.check(fullname in services and f"{fullname}-metrics" in services and
            services[f"{fullname}-metrics"]["metadata"]["labels"]["framezip.io/job"] ==
            "framezip-server", f"{name}: gRPC and metrics Services")
    config = find(objects, "ConfigMap", fullname)
    c.check(len(config) == 1 and arg_value(args, "--config") == "/etc/framezip/config/server.yaml",
            f"{name}: server settings in a ConfigMap read with --config")
    c.check("port-forward" in notes and f"{fullname}.{NAMESPACE}.svc" in notes,
            f"{name}: NOTES.txt says how to reach the server")

    if name == "defaults":
        kv = find(objects, "StatefulSet", f"{fullname}-kvstore")
        c.check(len(kv) == 1 and kv[0]["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]
                ["requests"]["storage"] == "20Gi", f"{name}: kvstore StatefulSet with a PVC")
        kv_args = container(kv[0], "framezip-kvstore")["args"] if kv else []
        c.check(arg_value(kv_args, "--kv-disk-path") == "/var/lib/framezip-kv" and
                arg_value(kv_args, "--kv-redis") is None, f"{name}: disk tier on the PVC, no Redis")
        headless = services.get(f"{fullname}-kvstore", {})
        c.check(headless.get("spec", {}).get("clusterIP") == "None",
                f"{name}: kvstore headless Service")
        c.check(arg_value(args, "--kvstore") == f"{fullname}-kvstore.{NAMESPACE}.svc:50061",
                f"{name}: server uses the in-chart kvstore", arg_value(args, "--kvstore"))
        c.check("nvidia.com/gpu" not in limits and arg_value(args, "--device") == "cpu",
                f"{name}: CPU by default")
        c.check(d["spec"]["replicas"] == 1 and not find(objects, "HorizontalPodAutoscaler"),
                f"{name}: 1 replica, no autoscaler")
        c.check("emptyDir" in volumes["media"], f"{name}: --media-dir on an emptyDir per pod")
    elif name == "gpu-external-redis":
        c.check(limits.get("nvidia.com/gpu") == 1 and
                pod["nodeSelector"].get("nvidia.com/gpu.present") == "true" and
                any(t["key"] == "nvidia.com/gpu" for t in pod["tolerations"]) and
                pod.get("runtimeClassName") == "nvidia",
                f"{name}: GPU limit, GPU node selector, toleration, runtime class")
        kv_args = container(find(objects, "StatefulSet", f"{fullname}-kvstore")[0],
                            "framezip-kvstore")["args"]
        c.check(arg_value(kv_args, "--kv-redis") == "redis.cache.svc:6379" and
                not find(objects, "StatefulSet", f"{fullname}-redis"),
                f"{name}: kvstore uses the external Redis, no in-chart Redis")
        c.check(arg_value(args, "--model") == "/models/llava-onevision-7b" and
                volumes["model"]["persistentVolumeClaim"]["claimName"] == "models" and
                mounts["/models"] == "model", f"{name}: model from the PVC, read-only")
        c.check(arg_value(args, "--auth-token-file") == "/etc/framezip/auth/tokens" and
                volumes["auth"]["secret"]["secretName"] == "framezip-tokens" and
                arg_value(args, "--tls-cert-file") == "/etc/framezip/tls/tls.crt" and
                volumes["tls"]["secret"]["secretName"] == "framezip-tls",
                f"{name}: auth token file and TLS from Secrets")
        c.check(arg_value(args, "--device") == "cuda", f"{name}: --device cuda on the GPU pods")
        c.check(len(find(objects, "NetworkPolicy")) == 2 and d["spec"]["replicas"] == 2,
                f"{name}: NetworkPolicies for server and kvstore, 2 replicas")
        ports = {p["name"]: p for p in services[fullname]["spec"]["ports"]}
        policy = find(objects, "NetworkPolicy", fullname)[0]
        openai_rule = [r for r in policy["spec"]["ingress"]
                       if r["ports"][0]["port"] == "http-openai"]
        c.check(openai == "0.0.0.0:8000" and ports.get("http-openai", {}).get("port") == 8000 and
                any(p["name"] == "http-openai" and p["containerPort"] == 8000
                    for p in server["ports"]) and len(openai_rule) == 1 and
                openai_rule[0]["from"][0]["namespaceSelector"]["matchLabels"] ==
                {"kubernetes.io/metadata.name": "web"},
                f"{name}: OpenAI API: --openai-listen, container and Service port, NetworkPolicy "
                "from networkPolicy.openaiFrom", openai)
        c.check(volumes["media"].get("persistentVolumeClaim", {}).get("claimName") ==
                "framezip-media" and "emptyDir" not in volumes["media"] and
                arg_value(args, "--media-dir") == "/var/lib/framezip/media",
                f"{name}: --media-dir on the ReadWriteMany claim every replica mounts")
    elif name == "cpu-monitoring-hpa":
        c.check("nvidia.com/gpu" not in limits and "nodeSelector" not in pod,
                f"{name}: no GPU request, no GPU node selection")
        hpa = find(objects, "HorizontalPodAutoscaler")
        metrics = hpa[0]["spec"]["metrics"] if hpa else []
        c.check(len(hpa) == 1 and "replicas" not in d["spec"] and
                metrics[0]["pods"]["metric"]["name"] == "framezip_num_requests_waiting" and
                metrics[0]["pods"]["target"]["averageValue"] == "4" and
                metrics[1]["resource"]["name"] == "cpu",
                f"{name}: HPA on framezip_num_requests_waiting (custom metrics API) and CPU; the "
                "Deployment leaves replicas to it")
        sm = find(objects, "ServiceMonitor")
        c.check(len(sm) == 1 and sm[0]["spec"]["jobLabel"] == "framezip.io/job" and
                sm[0]["metadata"]["labels"]["release"] == "kps",
                f"{name}: ServiceMonitor (job label from the Services)")
        import yaml
        with open(os.path.join(CHART, "rules", "framezip-alerts.yaml")) as f:
            rules_file = yaml.safe_load(f)
        pr = find(objects, "PrometheusRule")
        c.check(len(pr) == 1 and pr[0]["spec"]["groups"] == rules_file["groups"],
                f"{name}: PrometheusRule holds exactly rules/framezip-alerts.yaml")
        dash = find(objects, "ConfigMap", f"{fullname}-dashboard")
        with open(os.path.join(CHART, "dashboards", "framezip.json")) as f:
            dashboard = json.load(f)
        c.check(len(dash) == 1 and json.loads(dash[0]["data"]["framezip.json"]) == dashboard and
                dash[0]["metadata"]["labels"].get("grafana_dashboard") == "1",
                f"{name}: dashboard ConfigMap for the Grafana sidecar holds "
                "dashboards/framezip.json")
        redis = find(objects, "StatefulSet", f"{fullname}-redis")
        kv_args = container(find(objects, "StatefulSet", f"{fullname}-kvstore")[0],
                            "framezip-kvstore")["args"]
        c.check(len(redis) == 1 and
                arg_value(kv_args, "--kv-redis") == f"{fullname}-redis.{NAMESPACE}.svc:6379",
                f"{name}: in-chart Redis StatefulSet, kvstore pointed at it")
        c.check(len(find(objects, "NetworkPolicy")) == 3,
                f"{name}: NetworkPolicies for server, kvstore and Redis")
    elif name == "keda-initcontainer-embedded":
        so = find(objects, "ScaledObject")
        c.check(len(so) == 1 and so[0]["spec"]["triggers"][0]["type"] == "prometheus" and
                "framezip_num_requests_waiting" in so[0]["spec"]["triggers"][0]["metadata"]["query"]
                and not find(objects, "HorizontalPodAutoscaler") and "replicas" not in d["spec"],
                f"{name}: KEDA ScaledObject on the queue, no HPA",
                so[0]["spec"]["triggers"][0]["metadata"]["query"] if so else "")
        init = pod.get("initContainers", [])
        c.check(len(init) == 1 and {"name": "MODEL_DIR", "value": "/models/my-model"} in
                init[0]["env"] and arg_value(args, "--model") == "/models/my-model" and
                "emptyDir" in volumes["model"],
                f"{name}: init container fills the model emptyDir the server loads")
        c.check(arg_value(args, "--kvstore") == "embedded" and
                not find(objects, "StatefulSet"), f"{name}: embedded KV store, no StatefulSet")
        alerts = [r for g in find(objects, "PrometheusRule")[0]["spec"]["groups"]
                  for r in g["rules"]]
        names = [r["alert"] for r in alerts]
        c.check("FramezipTtftP99High" not in names and "FramezipTtftP99VeryHigh" in names and
                all(r["labels"].get("team") == "video" for r in alerts
                    if r["alert"] != "FramezipTtftP99VeryHigh"),
                f"{name}: PrometheusRule without the disabled alert, with alertLabels and the "
                "extra group")
    elif name == "image-volume-model":
        c.check(volumes["model"]["image"]["reference"] == "registry.example.com/models/tiny:1" and
                arg_value(args, "--model") == "/models/framezip-tiny-video",
                f"{name}: model from an image volume")


def gpu_present():
    """Whether nvidia-smi sees a GPU (the server's --device cuda needs one to start)."""
    if shutil.which("nvidia-smi") is None:
        return False
    return subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0


def run_rendered(c, name, objects, tmp):
    """Starts the built framezip-server and framezip-kvstore with the flags (and the settings
    file) the chart renders, paths and addresses moved to this machine: they must accept every
    one and start serving."""
    bin_dir = os.path.join(BINARY_DIR, "bin")
    if not os.path.exists(os.path.join(bin_dir, "framezip-server")):
        print(f"     {name}: no framezip-server in {bin_dir}: the rendered flags are not run")
        return
    fullname = f"{RELEASE}-framezip"
    work = os.path.join(tmp, name)
    os.makedirs(work)

    def start(binary, args, overrides):
        argv = [os.path.join(bin_dir, binary)]
        for a in args:
            flag = a.split("=", 1)[0]
            argv.append(f"{flag}={overrides[flag]}" if flag in overrides else a)
        port_file = os.path.join(work, f"{binary}.port")
        argv += [f"--port-file={port_file}"]
        log = open(os.path.join(work, f"{binary}.log"), "w")
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None and not (
                os.path.exists(port_file) and open(port_file).read().strip()):
            time.sleep(0.1)
        serving = proc.poll() is None and os.path.exists(port_file)
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        ok = serving and code == 0
        if ok:
            return True, "served, then drained on SIGTERM (exit 0)"
        with open(os.path.join(work, f"{binary}.log")) as f:
            tail = f.read().strip().splitlines()[-3:]
        return False, f"exit {code}: " + " | ".join(tail)

    common = {"--listen": "127.0.0.1:0", "--metrics-listen": "127.0.0.1:0"}
    kv = find(objects, "StatefulSet", f"{fullname}-kvstore")
    if kv:
        kv_args = container(kv[0], "framezip-kvstore")["args"]
        ok, detail = start("framezip-kvstore", kv_args, dict(
            common, **{"--kv-disk-path": os.path.join(work, "kv"), "--kv-host-bytes": str(1 << 24),
                       "--kv-redis": "127.0.0.1:1"}))
        c.check(ok, f"{name}: framezip-kvstore starts with the rendered flags", detail)
    d = find(objects, "Deployment", fullname)[0]
    args = container(d, "framezip-server")["args"]
    config = find(objects, "ConfigMap", fullname)[0]["data"]["server.yaml"]
    with open(os.path.join(work, "server.yaml"), "w") as f:
        f.write(config)
    with open(os.path.join(work, "tokens"), "w") as f:
        f.write("alice 0123456789abcdef\n")
    if any(a.startswith("--tls-cert-file") for a in args):
        if shutil.which("openssl") is None:
            print(f"     {name}: no openssl to make a test certificate: the rendered flags are "
                  "not run")
            return
        made = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                               "-days", "1", "-subj", "/CN=localhost",
                               "-keyout", os.path.join(work, "tls.key"),
                               "-out", os.path.join(work, "tls.crt")], capture_output=True)
        if made.returncode != 0:
            print(f"     {name}: openssl could not make a test certificate: not run")
            return
    overrides = {}
    device = next((a.split("=", 1)[1] for a in args if a.startswith("--device=")), "cpu")
    if device != "cpu" and not gpu_present():
        # The flag itself is checked (a bad value is a usage error before anything else); the
        # server needs the GPU it names to start, and this machine has none.
        print(f"     {name}: --device {device} rendered; no GPU here, so the server runs with "
              "--device=cpu")
        overrides["--device"] = "cpu"
    ok, detail = start("framezip-server", args, dict(
        common, **overrides, **{"--config": os.path.join(work, "server.yaml"),
                   "--model": os.path.join(SOURCE_DIR, "models", "framezip-tiny-video"),
                   "--media-dir": os.path.join(work, "media"), "--kvstore": "embedded",
                   "--auth-token-file": os.path.join(work, "tokens"),
                   "--tls-cert-file": os.path.join(work, "tls.crt"),
                   "--tls-key-file": os.path.join(work, "tls.key")}))
    c.check(ok, f"{name}: framezip-server starts with the rendered flags and settings file",
            detail)
    shutil.rmtree(work, ignore_errors=True)


def main():
    ensure_packages()
    import helm_python

    c = Checks()
    print(f"helm-python-sdk {helm_python.__version__} (Helm {helm_python.helm_sdk_version()}), "
          f"kubernetes-validate {__import__('kubernetes_validate').__version__}")
    tmp = tempfile.mkdtemp(prefix="framezip-chart-")
    with helm_python.Chart.load(CHART) as chart:
        c.check(chart.schema is not None, "chart ships values.schema.json")
        for name, values, versions in VALUE_SETS:
            print(f"--- {name}")
            try:
                chart.validate_schema(values)
                rendered = chart.render(values, name=RELEASE, namespace=NAMESPACE,
                                        is_install=True)
            except helm_python.HelmError as e:
                c.check(False, f"{name}: renders", str(e))
                continue
            objects = objects_of(rendered)
            c.check(bool(objects), f"{name}: renders", f"{len(objects)} objects")
            for version in ("v1.29.0", "v1.33.0"):
                report = helm_python.lint(CHART, values, strict=True, namespace=NAMESPACE,
                                          kube_version=version)
                findings = [m for m in report["messages"] if m["severity"] >= 2]
                c.check(not report["errors"] and not findings,
                        f"{name}: helm lint --strict (Kubernetes {version})",
                        "; ".join(f"{m['path']}: {m['error']}" for m in findings) +
                        "; ".join(report["errors"]) or
                        f"{len(report['messages'])} info messages")
            validate_objects(c, name, objects, versions)
            notes = next((t for p, t in rendered.items() if p.endswith("NOTES.txt")), "")
            check_set(c, name, objects, notes)
            run_rendered(c, name, objects, tmp)
        print("--- values the chart refuses")
        for values, why in BAD_VALUES:
            try:
                chart.validate_schema(values)
                chart.render(values, name=RELEASE, namespace=NAMESPACE)
                c.check(False, f"refuses {json.dumps(values)}", "rendered")
            except helm_python.HelmError as e:
                message = " ".join(str(e).split())
                c.check(why in message, f"refuses {json.dumps(values)}", message[-150:])
    shutil.rmtree(tmp, ignore_errors=True)
    c.finish()


if __name__ == "__main__":
    main()
