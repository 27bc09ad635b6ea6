{{/* Names. <release>-framezip unless the release name already holds the chart's name. */}}
{{- define "framezip.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "framezip.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "framezip.kvstoreName" -}}
{{- printf "%s-kvstore" (include "framezip.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "framezip.redisName" -}}
{{- printf "%s-redis" (include "framezip.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "framezip.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "framezip.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Labels: call with (dict "ctx" $ "component" "server"). */}}
{{- define "framezip.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .ctx.Chart.Name .ctx.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "framezip.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: framezip
{{- end -}}

{{- define "framezip.selectorLabels" -}}
app.kubernetes.io/name: {{ include "framezip.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "framezip.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* Where the server keeps session KV between turns (--kvstore). */}}
{{- define "framezip.serverKvstore" -}}
{{- if .Values.server.kvstore -}}
{{- .Values.server.kvstore -}}
{{- else if .Values.kvstore.enabled -}}
{{- printf "%s.%s.svc:%d" (include "framezip.kvstoreName" .) .Release.Namespace (int .Values.kvstore.grpcPort) -}}
{{- else -}}
embedded
{{- end -}}
{{- end -}}

{{/* The Redis tier address the KV store daemon uses (--kv-redis); empty without Redis. */}}
{{- define "framezip.redisAddress" -}}
{{- if eq .Values.redis.mode "internal" -}}
{{- printf "%s.%s.svc:%d" (include "framezip.redisName" .) .Release.Namespace (int .Values.redis.internal.port) -}}
{{- else if eq .Values.redis.mode "external" -}}
{{- .Values.redis.external.address -}}
{{- end -}}
{{- end -}}

{{/* The model directory the server loads (--model). */}}
{{- define "framezip.modelDir" -}}
{{- if eq .Values.model.source "image" -}}
{{- .Values.model.imagePath -}}
{{- else if .Values.model.dir -}}
{{- printf "%s/%s" (trimSuffix "/" .Values.model.mountPath) .Values.model.dir -}}
{{- else -}}
{{- .Values.model.mountPath -}}
{{- end -}}
{{- end -}}

{{/* Seconds between SIGTERM's arrival (after preStop) and SIGKILL: preStop wait + turns'
     grace + time to commit and flush session KV, unless set outright. */}}
{{- define "framezip.terminationGracePeriodSeconds" -}}
{{- if .Values.server.terminationGracePeriodSeconds -}}
{{- .Values.server.terminationGracePeriodSeconds -}}
{{- else -}}
{{- add .Values.server.preStopSleepSeconds .Values.server.graceSeconds .Values.server.drainFlushSeconds -}}
{{- end -}}
{{- end -}}

{{- define "framezip.authSecretName" -}}
{{- default (printf "%s-auth" (include "framezip.fullname" .)) .Values.auth.existingSecret -}}
{{- end -}}

{{/* Values that do not fit together stop the render with a message. */}}
{{- define "framezip.validate" -}}
{{- if and (ne .Values.redis.mode "none") (not .Values.kvstore.enabled) -}}
{{- fail "redis.mode internal/external needs kvstore.enabled: the Redis tier belongs to framezip-kvstore (the server's embedded store has no Redis tier)" -}}
{{- end -}}
{{- if and (eq .Values.redis.mode "external") (not .Values.redis.external.address) -}}
{{- fail "redis.mode=external needs redis.external.address (host:port)" -}}
{{- end -}}
{{- if and (eq .Values.model.source "pvc") (not .Values.model.pvc.claimName) -}}
{{- fail "model.source=pvc needs model.pvc.claimName" -}}
{{- end -}}
{{- if and (eq .Values.model.source "imageVolume") (not .Values.model.imageVolume.reference) -}}
{{- fail "model.source=imageVolume needs model.imageVolume.reference" -}}
{{- end -}}
{{- if and (eq .Values.model.source "initContainer") (not .Values.model.initContainer.image) -}}
{{- fail "model.source=initContainer needs model.initContainer.image" -}}
{{- end -}}
{{- if and .Values.auth.enabled (not .Values.auth.existingSecret) (not .Values.auth.tokens) -}}
{{- fail "auth.enabled needs auth.existingSecret (a Secret holding the token file) or auth.tokens" -}}
{{- end -}}
{{- if and .Values.tls.enabled (not .Values.tls.secretName) -}}
{{- fail "tls.enabled needs tls.secretName (a kubernetes.io/tls Secret)" -}}
{{- end -}}
{{- if and .Values.autoscaling.enabled (eq .Values.autoscaling.kind "keda") (not .Values.autoscaling.keda.serverAddress) -}}
{{- fail "autoscaling.kind=keda needs autoscaling.keda.serverAddress (the Prometheus URL KEDA queries)" -}}
{{- end -}}
{{- if and .Values.autoscaling.enabled (gt (int .Values.autoscaling.minReplicas) (int .Values.autoscaling.maxReplicas)) -}}
{{- fail "autoscaling.minReplicas is larger than autoscaling.maxReplicas" -}}
{{- end -}}
{{- end -}}

{{/* The queue-depth query KEDA evaluates: waiting turns summed over this release's pods. */}}
{{- define "framezip.kedaQuery" -}}
{{- if .Values.autoscaling.keda.query -}}
{{- .Values.autoscaling.keda.query -}}
{{- else -}}
{{- printf "sum(framezip_num_requests_waiting{namespace=%q, pod=~%q})" .Release.Namespace (printf "%s-.*" (include "framezip.fullname" .)) -}}
{{- end -}}
{{- end -}}
