{{/*
lockgate chart helpers: names, the standard app.kubernetes.io/* labels, and the values
every component derives from the others (URLs, Secret names, the image).
*/}}

{{/* The chart name, unless nameOverride says otherwise. */}}
{{- define "lockgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's base name: "<release>-lockgate", or just the release when it already says lockgate. */}}
{{- define "lockgate.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains (include "lockgate.name" .) .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "lockgate.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/* "name-version" for the helm.sh/chart label. */}}
{{- define "lockgate.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every object; call with (dict "ctx" . "component" "gateway"). */}}
{{- define "lockgate.labels" -}}
helm.sh/chart: {{ include "lockgate.chart" .ctx }}
{{ include "lockgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: lockgate
{{- with .ctx.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The immutable selector of one component's pods. */}}
{{- define "lockgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "lockgate.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Object names per component. */}}
{{- define "lockgate.gateway.fullname" -}}
{{- printf "%s-gateway" (include "lockgate.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- define "lockgate.operator.fullname" -}}
{{- printf "%s-operator" (include "lockgate.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- define "lockgate.operator.leaseName" -}}
{{- printf "%s-scaler" (include "lockgate.operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- define "lockgate.redis.fullname" -}}
{{- printf "%s-redis" (include "lockgate.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* ServiceAccount names: the given one, else the component's name (or "default"). */}}
{{- define "lockgate.gateway.serviceAccountName" -}}
{{- if .Values.gateway.serviceAccount.create }}
{{- default (include "lockgate.gateway.fullname" .) .Values.gateway.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.gateway.serviceAccount.name }}
{{- end }}
{{- end }}
{{- define "lockgate.operator.serviceAccountName" -}}
{{- if .Values.operator.serviceAccount.create }}
{{- default (include "lockgate.operator.fullname" .) .Values.operator.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.operator.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The control-plane image (gateway and operator share it); the tag defaults to appVersion. */}}
{{- define "lockgate.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/* A value of the settings Secret: the one given, else the previous release's (`previous`:
that Secret's data, under `key`), else 32 random characters. */}}
{{- define "lockgate.keptValue" -}}
{{- if .given }}{{ .given }}
{{- else }}{{ ternary (index .previous .key | default "" | b64dec) (randAlphaNum 32) (hasKey .previous .key) }}
{{- end }}
{{- end }}

{{/* Secret names: the user's existing Secret, else the one this chart writes. */}}
{{- define "lockgate.settingsSecretName" -}}
{{- default (printf "%s-settings" (include "lockgate.fullname" .)) .Values.settings.existingSecret }}
{{- end }}
{{- define "lockgate.apiKeysSecretName" -}}
{{- default (printf "%s-api-keys" (include "lockgate.fullname" .)) .Values.apiKeys.existingSecret }}
{{- end }}
{{- define "lockgate.clientKeySecretName" -}}
{{- printf "%s-client-key" (include "lockgate.fullname" .) }}
{{- end }}

{{/* The bearer token of the gateway's /metrics: required when enabled, given, or in an
existing Secret; kept in metrics.token.existingSecret, else in the settings Secret. */}}
{{- define "lockgate.metricsToken.enabled" -}}
{{- with .Values.metrics.token }}{{ if or .enabled .value .existingSecret }}true{{ end }}{{ end }}
{{- end }}
{{- define "lockgate.metricsToken.secretName" -}}
{{- default (include "lockgate.settingsSecretName" .) .Values.metrics.token.existingSecret }}
{{- end }}
{{- define "lockgate.metricsToken.secretKey" -}}
{{- ternary .Values.metrics.token.secretKey "LOCKGATE_METRICS_TOKEN" (ne .Values.metrics.token.existingSecret "") }}
{{- end }}
{{/* LOCKGATE_METRICS_TOKEN of the gateway (which requires it) and the operator (which sends it). */}}
{{- define "lockgate.metricsToken.env" -}}
- name: LOCKGATE_METRICS_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "lockgate.metricsToken.secretName" . }}
      key: {{ include "lockgate.metricsToken.secretKey" . }}
{{- end }}

{{/* An environment variable's value, as the text the user wrote in values.yaml. Helm reads
every number of a values file as a float64, which `quote` prints as 5e+07: JSON prints
it back as written (50000000, 0.5). Strings are quoted as they are, booleans as true/false. */}}
{{- define "lockgate.envValue" -}}
{{- if kindIs "float64" . }}{{ toJson . | quote }}{{ else }}{{ . | toString | quote }}{{ end }}
{{- end }}

{{/* The API versions of objects that are newer than the oldest Kubernetes the chart
supports. `helm template` reports policy/v1 whatever --kube-version says, so the version
decides too; a real install sees what the server serves. */}}
{{- define "lockgate.pdb.apiVersion" -}}
{{- if and (.Capabilities.APIVersions.Has "policy/v1") (semverCompare ">=1.21-0" .Capabilities.KubeVersion.Version) }}policy/v1{{ else }}policy/v1beta1{{ end }}
{{- end }}

{{/* Objects of other operators' kinds are written only where their API is served (or
when forced: e.g. `helm template` for a cluster that will serve it): else
`helm install` fails on a kind the cluster does not know. "true" or empty. */}}
{{- define "lockgate.serviceMonitor.enabled" -}}
{{- with .Values.gateway.serviceMonitor }}
{{- if and .enabled (or .force ($.Capabilities.APIVersions.Has "monitoring.coreos.com/v1")) }}true{{ end }}
{{- end }}
{{- end }}
{{- define "lockgate.keda.enabled" -}}
{{- if and .Values.keda.enabled (or .Values.keda.force (.Capabilities.APIVersions.Has "keda.sh/v1alpha1")) }}true{{ end }}
{{- end }}

{{/* In-cluster URLs: workers in any namespace reach the gateway by its full DNS name. */}}
{{- define "lockgate.gateway.internalUrl" -}}
{{- printf "http://%s.%s.svc.%s:%d" (include "lockgate.gateway.fullname" .) .Release.Namespace .Values.clusterDomain (int .Values.gateway.service.port) }}
{{- end }}
{{- define "lockgate.operator.manageUrl" -}}
{{- printf "http://%s.%s.svc.%s:%d" (include "lockgate.operator.fullname" .) .Release.Namespace .Values.clusterDomain (int .Values.operator.manage.servicePort) }}
{{- end }}
{{- define "lockgate.redis.host" -}}
{{- printf "%s.%s.svc.%s" (include "lockgate.redis.fullname" .) .Release.Namespace .Values.clusterDomain }}
{{- end }}

{{/* The public job API base ({base_url}): baseUrl, else the first Ingress host, else the in-cluster gateway. */}}
{{- define "lockgate.baseUrl" -}}
{{- if .Values.baseUrl }}
{{- .Values.baseUrl | trimSuffix "/" }}
{{- else if and .Values.gateway.ingress.enabled .Values.gateway.ingress.hosts }}
{{- $host := (first .Values.gateway.ingress.hosts).host }}
{{- printf "%s://%s" (ternary "https" "http" (gt (len .Values.gateway.ingress.tls) 0)) $host }}
{{- else }}
{{- include "lockgate.gateway.internalUrl" . }}
{{- end }}
{{- end }}

{{/* Where the keys file is mounted in gateway pods. */}}
{{- define "lockgate.keysDir" -}}/etc/lockgate/keys{{- end }}

{{/* The keys file's volume. Only the gateway reads it: the management API in the operator
accepts only keys kept in Redis (`lockgate keys create`). */}}
{{- define "lockgate.keysVolume" -}}
- name: api-keys
  secret:
    secretName: {{ include "lockgate.apiKeysSecretName" . }}
    items:
      - key: {{ .Values.apiKeys.secretKey }}
        path: {{ .Values.apiKeys.secretKey }}
{{- end }}

{{/* Refuse settings that cannot work, at render time. */}}
{{- define "lockgate.validate" -}}
{{- if and (not .Values.redis.enabled) (not .Values.externalRedis.url) (not .Values.settings.existingSecret) }}
{{- fail "redis.enabled=false needs externalRedis.url, or settings.existingSecret holding LOCKGATE_REDIS_URL" }}
{{- end }}
{{- if and .Values.redis.enabled .Values.externalRedis.url }}
{{- fail "set externalRedis.url only with redis.enabled=false" }}
{{- end }}
{{- if and .Values.operator.peering (gt (int .Values.operator.replicaCount) 1) }}
{{- fail "operator.replicaCount > 1 needs operator.peering=false: kopf pauses every operator when peers of equal priority run (the replicas elect a scaler through a Lease instead)" }}
{{- end }}
{{- if and .Values.settings.existingSecret .Values.metrics.token.value (not .Values.metrics.token.existingSecret) }}
{{- fail "metrics.token.value goes into the chart's settings Secret, which settings.existingSecret replaces: put LOCKGATE_METRICS_TOKEN in that Secret, or give metrics.token.existingSecret" }}
{{- end }}
{{- end }}

{{/* The operator's rules in each namespace it manages (a Role, or the ClusterRole). */}}
{{- define "lockgate.operator.rules" -}}
# kopf lists, watches and patches (annotations, finalizer) Endpoints and Templates; the
# operator reads Endpoints (kube/cluster.py) and the management API creates, patches and
# deletes them (manage/kube.py). kopf and the scaler patch the status subresource.
- apiGroups: [lockgate.dev]
  resources: [endpoints]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [lockgate.dev]
  resources: [endpoints/status]
  verbs: [patch]
- apiGroups: [lockgate.dev]
  resources: [templates]
  verbs: [get, list, watch, patch]
# Worker Deployments (kube/cluster.py apply: read, create, replace; kube/scaler.py lists
# them); deletion is left to the garbage collector through owner references.
- apiGroups: [apps]
  resources: [deployments]
  verbs: [get, list, create, update]
# The scaler sets worker counts through the scale subresource (a merge patch, no read).
- apiGroups: [apps]
  resources: [deployments/scale]
  verbs: [patch]
# flashboot DaemonSets: applied, and deleted when flashboot is switched off.
- apiGroups: [apps]
  resources: [daemonsets]
  verbs: [get, create, update, delete]
# Worker-key Secrets (kube/cluster.py worker_key): read, created, refilled when emptied.
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, create, update]
# The scaler lists worker pods and marks busy ones with controller.kubernetes.io/pod-deletion-cost;
# it holds their readiness gate, the lockgate.dev/Serving condition (scaling/deployment_pool.py).
- apiGroups: [""]
  resources: [pods]
  verbs: [list, patch]
- apiGroups: [""]
  resources: [pods/status]
  verbs: [patch]
# kopf and the scaler post Events on Endpoints.
- apiGroups: [""]
  resources: [events]
  verbs: [create]
{{- end }}

{{/* A helper image of the operator's (operator.helperImages.*): `repository:tag@digest`,
or `repository:tag` without a digest. */}}
{{- define "lockgate.helperImage" -}}
{{- printf "%s:%s" .repository (toString .tag) }}{{ with .digest }}@{{ . }}{{ end }}
{{- end }}
