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

{{/* checkov.io/skipN annotations: the findings of a scanner (checkov) that this object keeps
on purpose, each written only while checkov would report it (docs/security.md, "Scanner
findings kept"; tests/test_chart_scan.py). Call with a dict: `image` (its values:
pullPolicy, digest) and `digestValue` (the value that pins it); `resources` (a list, one
per container); `secretEnv` (a Secret reaches the environment) with `secretReason`;
`apiToken` (the pod calls the Kubernetes API); `more` (further "CKV_…=reason" items).
checkov splits an item at its "=": no reason may hold one. */}}
{{- define "lockgate.scanSkips" -}}
{{- $skips := list }}
{{- if not .image.digest }}
{{- $skips = append $skips (printf "CKV_K8S_43=a tag, not a digest: set %s to pin it (docs/security.md)" .digestValue) }}
{{- if ne .image.pullPolicy "Always" }}
{{- $skips = append $skips (printf "CKV_K8S_15=%s by tag; set %s to pin it (docs/security.md)" .image.pullPolicy .digestValue) }}
{{- end }}
{{- end }}
{{- $unlimited := false }}
{{- range .resources }}{{ if not (.limits | default dict).cpu }}{{ $unlimited = true }}{{ end }}{{ end }}
{{- if $unlimited }}
{{- $skips = append $skips "CKV_K8S_11=a CPU request and no limit: CFS throttling would stall it while its node has idle CPU (docs/security.md)" }}
{{- end }}
{{- if .secretEnv }}
{{- $skips = append $skips (printf "CKV_K8S_35=%s (docs/security.md)" .secretReason) }}
{{- end }}
{{- if .apiToken }}
{{- $skips = append $skips "CKV_K8S_38=it calls the Kubernetes API with this token, with the RBAC in docs/security.md" }}
{{- end }}
{{- range $i, $skip := concat $skips (.more | default list) }}
checkov.io/skip{{ add1 $i }}: {{ $skip | quote }}
{{- end }}
{{- end }}
{{/* The CKV_K8S_35 reason of the lockgate processes. */}}
{{- define "lockgate.scanSkips.settingsEnv" -}}
lockgate reads its settings, secrets included, from LOCKGATE_* variables only
{{- end }}

{{/* The Redis image: `repository@digest` when redis.image.digest is set, else `repository:tag`. */}}
{{- define "lockgate.redis.image" -}}
{{- with .Values.redis.image }}
{{- if .digest }}{{ printf "%s@%s" .repository .digest }}{{ else }}{{ printf "%s:%s" .repository (toString .tag) }}{{ end }}
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

{{/* lockgate's own Secrets, which no Template may hand workers (LOCKGATE_RESERVED_SECRETS of
the operator and the management API; docs/security.md): comma-separated names. */}}
{{- define "lockgate.reservedSecrets" -}}
{{- $names := list (include "lockgate.settingsSecretName" .) (include "lockgate.apiKeysSecretName" .) (include "lockgate.clientKeySecretName" .) }}
{{- $names = append $names .Values.metrics.token.existingSecret }}
{{- $names = append $names .Values.externalRedis.existingSecret }}
{{- $names = append $names .Values.externalRedis.tls.existingSecret }}
{{- join "," (compact $names | uniq) }}
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
{{- printf "http://%s.%s.svc.%s:%d" (include "lockgate.manage.fullname" .) .Release.Namespace .Values.clusterDomain (int .Values.operator.manage.servicePort) }}
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
{{- include "lockgate.redis.validate" . }}
{{- if and .Values.operator.peering (gt (int .Values.operator.replicaCount) 1) }}
{{- fail "operator.replicaCount > 1 needs operator.peering=false: kopf pauses every operator when peers of equal priority run (the replicas elect a scaler through a Lease instead)" }}
{{- end }}
{{- if and .Values.settings.existingSecret .Values.metrics.token.value (not .Values.metrics.token.existingSecret) }}
{{- fail "metrics.token.value goes into the chart's settings Secret, which settings.existingSecret replaces: put LOCKGATE_METRICS_TOKEN in that Secret, or give metrics.token.existingSecret" }}
{{- end }}
{{- end }}

{{/* -- Access: RBAC names and rules, the management API (docs/security.md) -- */}}

{{/* The name of a cluster-scoped object (ClusterRole, ClusterRoleBinding): the release
namespace, then `name`, so that releases of the same name in two namespaces never share
one; kept within 63 characters by a digest of what was cut. */}}
{{- define "lockgate.clusterScopedName" -}}
{{- $full := printf "%s-%s" .ctx.Release.Namespace .name }}
{{- if gt (len $full) 63 }}
{{- printf "%s-%s" ($full | trunc 54 | trimSuffix "-") ($full | sha256sum | trunc 8) }}
{{- else }}
{{- $full }}
{{- end }}
{{- end }}

{{/* kopf's peering object (operator.peering): cluster-scoped in cluster-wide mode. */}}
{{- define "lockgate.peeringName" -}}
{{- include "lockgate.clusterScopedName" (dict "ctx" . "name" (include "lockgate.operator.fullname" .)) }}
{{- end }}

{{/* The management API (`lockgate manage`): its Deployment, Service and ServiceAccount. */}}
{{- define "lockgate.manage.fullname" -}}
{{- printf "%s-manage" (include "lockgate.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- define "lockgate.manage.serviceAccountName" -}}
{{- with .Values.operator.manage.serviceAccount }}
{{- if .create }}
{{- default (include "lockgate.manage.fullname" $) .name }}
{{- else }}
{{- default "default" .name }}
{{- end }}
{{- end }}
{{- end }}
{{/* Where the management API writes Endpoints. */}}
{{- define "lockgate.endpointNamespace" -}}
{{- .Values.operator.endpointNamespace | default (first .Values.operator.namespaces) | default .Release.Namespace }}
{{- end }}

{{/* What the operator watches, as its ClusterRole's lockgate.dev/watched-namespaces
annotation says it: "*" (every namespace) or the sorted, comma-separated list. */}}
{{- define "lockgate.watchedNamespaces" -}}
{{- if .Values.operator.namespaces }}{{ .Values.operator.namespaces | sortAlpha | join "," }}{{ else }}*{{ end }}
{{- end }}

{{/* Refuse access settings that cannot work. At install and upgrade (not `helm template`,
which sees no cluster) also refuse a release whose operator would watch a namespace that
another lockgate release's operator watches: both would reconcile the same Endpoints. */}}
{{- define "lockgate.validate.access" -}}
{{- $namespaces := .Values.operator.namespaces }}
{{- with .Values.operator.endpointNamespace }}
{{- if and $namespaces (not (has . $namespaces)) }}
{{- fail (printf "operator.endpointNamespace %q is not among operator.namespaces %v: the operator would never reconcile the Endpoints the management API writes there; add it to operator.namespaces" . $namespaces) }}
{{- end }}
{{- end }}
{{- $roles := lookup "rbac.authorization.k8s.io/v1" "ClusterRole" "" "" }}
{{- range ($roles.items | default list) }}
{{- $annotations := .metadata.annotations | default dict }}
{{- $theirs := index $annotations "lockgate.dev/watched-namespaces" | default "" }}
{{- $release := printf "%s/%s" (index $annotations "meta.helm.sh/release-namespace" | default "") (index $annotations "meta.helm.sh/release-name" | default "") }}
{{- if and $theirs (ne $release (printf "%s/%s" $.Release.Namespace $.Release.Name)) }}
{{- $overlap := list }}
{{- if or (eq $theirs "*") (not $namespaces) }}
{{- $overlap = list "every namespace" }}
{{- else }}
{{- range $namespaces }}{{ if has . (splitList "," $theirs) }}{{ $overlap = append $overlap . }}{{ end }}{{ end }}
{{- end }}
{{- if $overlap }}
{{- fail (printf "the lockgate release %s already watches %s (operator.namespaces): two operators would reconcile the same Endpoints (overlap: %s). Give each release its own operator.namespaces, disjoint from the others'" $release (ternary "every namespace" $theirs (eq $theirs "*")) (join ", " $overlap)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* The operator's rules in each namespace it manages (a Role, or the ClusterRole). It
reads no Secret's data (only the labels of those Templates hand workers) and writes no
Endpoint (the management API does, with its own Role) but a build's canary. */}}
{{- define "lockgate.operator.rules" -}}
# kopf lists and watches Endpoints and Templates and patches them (its annotations and the
# lockgate.dev/cleanup finalizer: kube/handlers.py); kube/cluster.py get_endpoint,
# list_endpoints (kube/reconcile.py template_users) read Endpoints.
- apiGroups: [lockgate.dev]
  resources: [endpoints, templates]
  verbs: [get, list, watch, patch]
# kopf and the scaler write the status (kube/cluster.py patch_endpoint_status).
- apiGroups: [lockgate.dev]
  resources: [endpoints/status]
  verbs: [patch]
# Worker Deployments, DaemonSets and Secrets name their Endpoint as owner with
# blockOwnerDeletion: OwnerReferencesPermissionEnforcement (OpenShift) asks for this.
# Templates own nothing, so templates/finalizers is not granted.
- apiGroups: [lockgate.dev]
  resources: [endpoints/finalizers]
  verbs: [update]
# Worker Deployments (kube/cluster.py apply: read, create, replace; kube/scaler.py lists
# them; kube/reconcile.py reads the worker key's digest from one; kopf watches them for
# kube/watched.py); deletion is left to the garbage collector through owner references.
- apiGroups: [apps]
  resources: [deployments]
  verbs: [get, list, watch, create, update]
# The scaler sets worker counts through the scale subresource (a merge patch, no read).
- apiGroups: [apps]
  resources: [deployments/scale]
  verbs: [patch]
# flashboot DaemonSets: applied, and deleted when flashboot is switched off.
- apiGroups: [apps]
  resources: [daemonsets]
  verbs: [get, create, update, delete]
# A load-balancing endpoint's NetworkPolicy (kube/reconcile.py apply_workloads: only
# gateway pods reach its workers' HTTP port): applied, and deleted when it is not wanted.
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, create, update, delete]
# Worker-key Secrets (kube/cluster.py worker_key): created, and replaced by an
# unconditional update when no digest of the key is known. get: the labels of each Secret a
# Template hands workers (kube/reconcile.py check_secrets, a metadata-only GET: no data is
# read); the operator may start pods that mount any Secret here, so get adds no reach. No
# list or watch.
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, create, update]
# The scaler lists worker pods (kopf watches them for kube/watched.py) and marks busy ones
# with controller.kubernetes.io/pod-deletion-cost; it holds their readiness gate, the
# lockgate.dev/Serving condition (kube/deployment_pool.py); it deletes a pod whose worker
# asked to be replaced after its job (refresh_worker), or was marked unhealthy (a failed
# fitness check or warm-up, its startupTimeout missed: kube/worker_health.py), and one a
# person restarted or stopped from the Workers tab (asked through Redis: docs/workers.md).
- apiGroups: [""]
  resources: [pods]
  verbs: [list, watch, patch, delete]
- apiGroups: [""]
  resources: [pods/status]
  verbs: [patch]
# The last lines of a worker that missed its startupTimeout, quoted in why it was replaced
# (kube/worker_health.py); no other log is read.
- apiGroups: [""]
  resources: [pods/log]
  verbs: [get]
# A queue Endpoint's batch pool (Batch Jobs: kube/batch_pool.py): a hidden child Endpoint
# the operator creates once the endpoint has a batch, patches (the get, patch above) to
# follow it, and leaves to the garbage collector (it is owned by the endpoint).
- apiGroups: [lockgate.dev]
  resources: [endpoints]
  verbs: [create]
{{- if .Values.builds.registry }}
# In-cluster builds (builds.registry; kube/builds.py): a Job per build, created, watched
# (kopf) and deleted when the build is cancelled or its Endpoint deleted; its pod's
# container statuses are read with the pods list/watch above and its log with pods/log.
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, watch, create, delete]
# A build with tests.json is tested on a canary: an Endpoint the operator creates beside
# the endpoint and deletes once its tests ended, and with tests.json's config.env a
# Template of the canary's own, made and deleted with it (kube/canary.py).
- apiGroups: [lockgate.dev]
  resources: [endpoints, templates]
  verbs: [create, delete]
{{- end }}
# kopf and the scaler post Events on Endpoints.
- apiGroups: [""]
  resources: [events]
  verbs: [create]
{{- end }}

{{/* -- chartlife: CRDs shared by several releases ----------------------------------- */}}

{{/* Whether this release writes the CRD `name` (call with (dict "ctx" . "name" NAME)): the
CRD is absent, or helm's ownership annotations name this release. A CRD applied by
`kubectl apply -f crds/`, or owned by another release, is left to its owner: helm would
refuse to import it ("exists and cannot be imported into the current release"). `lookup`
sees nothing under `helm template`, which so renders every CRD. "true" or empty. */}}
{{- define "lockgate.crd.owned" -}}
{{- $crd := lookup "apiextensions.k8s.io/v1" "CustomResourceDefinition" "" .name }}
{{- $owner := dig "metadata" "annotations" dict $crd }}
{{- $release := index $owner "meta.helm.sh/release-name" | default "" }}
{{- $namespace := index $owner "meta.helm.sh/release-namespace" | default "" }}
{{- if or (not $crd) (and (eq $release .ctx.Release.Name) (eq $namespace .ctx.Release.Namespace)) }}true{{ end }}
{{- end }}

{{/* -- chartlife: generated settings, Redis bounds and storage ----------------------- */}}

{{/* A generated setting, the same in every template of one render, so the Secret and the
checksums that roll pods on its change agree: given, else the previous release's, else
random (lockgate.keptValue). Memoised under the key "__generated" of the values, which every template of the
chart shares. Call with (dict "ctx" . "given" G "previous" P "key" K). */}}
{{- define "lockgate.generated" -}}
{{- if not (hasKey .ctx.Values "__generated") }}{{ $_ := set .ctx.Values "__generated" dict }}{{ end }}
{{- $memo := get .ctx.Values "__generated" }}
{{- if not (hasKey $memo .key) }}{{ $_ := set $memo .key (include "lockgate.keptValue" .) }}{{ end }}
{{- index $memo .key }}
{{- end }}

{{/* The data of the settings Secret of the previous release (empty on a first install and
under `helm template`). */}}
{{- define "lockgate.settings.previous" -}}
{{- (lookup "v1" "Secret" .Release.Namespace (include "lockgate.settingsSecretName" .)).data | default dict | toJson }}
{{- end }}

{{/* The chart's Redis password: settings.existingSecret's REDIS_PASSWORD when given (as far
as `lookup` sees it), else the generated one. */}}
{{- define "lockgate.redis.password" -}}
{{- $previous := include "lockgate.settings.previous" . | fromJson }}
{{- if .Values.settings.existingSecret }}
{{- index $previous "REDIS_PASSWORD" | default "" | b64dec }}
{{- else }}
{{- include "lockgate.generated" (dict "ctx" . "given" .Values.redis.auth.password "previous" $previous "key" "REDIS_PASSWORD") }}
{{- end }}
{{- end }}

{{/* Bytes of a Kubernetes quantity ("1Gi", "512Mi", "1.5G", 1073741824). */}}
{{- define "lockgate.bytes" -}}
{{- $text := ternary (toJson .) (toString .) (kindIs "float64" .) }}
{{- if not (regexMatch "^[0-9]+(\\.[0-9]+)?(e[0-9]+|[KMGTPE]i|[kMGTPE])?$" $text) }}
{{- fail (printf "%q is not a memory quantity (e.g. 1Gi, 512Mi)" $text) }}
{{- end }}
{{- $units := dict "" 1 "k" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 "P" 1000000000000000 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 "Pi" 1125899906842624 }}
{{- $unit := regexReplaceAll "^[0-9.]+" $text "" }}
{{- if hasPrefix "e" $unit }}{{ $text | float64 | int64 }}
{{- else }}{{ mulf (regexFind "^[0-9.]+" $text | float64) (index $units $unit) | int64 }}
{{- end }}
{{- end }}

{{/* Redis's maxmemory: redis.maxmemory, else redis.maxmemoryPercent of the container's
memory limit; the rest of the limit is headroom for an AOF rewrite's copy-on-write pages,
client buffers and fragmentation (docs/operations.md, "Redis memory"). */}}
{{- define "lockgate.redis.maxmemory" -}}
{{- $limit := dig "limits" "memory" "" .Values.redis.resources }}
{{- if .Values.redis.maxmemory }}{{ .Values.redis.maxmemory }}
{{- else if not $limit }}
{{- fail "redis.resources.limits.memory is required (Redis's maxmemory is derived from it), or set redis.maxmemory" }}
{{- else }}{{ div (mul (include "lockgate.bytes" $limit | int64) (int64 .Values.redis.maxmemoryPercent)) 100 }}
{{- end }}
{{- end }}

{{/* The StatefulSet's governing Service: the headless one, unless a release from before it
existed made the StatefulSet with another (serviceName is immutable). */}}
{{- define "lockgate.redis.serviceName" -}}
{{- $sts := lookup "apps/v1" "StatefulSet" .Release.Namespace (include "lockgate.redis.fullname" .) }}
{{- dig "spec" "serviceName" (include "lockgate.redis.headlessName" .) $sts }}
{{- end }}
{{- define "lockgate.redis.headlessName" -}}
{{- printf "%s-headless" (include "lockgate.redis.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Refuse, at render time, a change to Redis storage that the StatefulSet's immutable
volumeClaimTemplates would refuse half-way through an upgrade. */}}
{{- define "lockgate.redis.checkStorage" -}}
{{- $sts := lookup "apps/v1" "StatefulSet" .Release.Namespace (include "lockgate.redis.fullname" .) }}
{{- if $sts }}
{{- $runbook := "a StatefulSet's volumeClaimTemplates cannot change: follow docs/install.md, \"Changing Redis storage\"" }}
{{- $wanted := .Values.redis.persistence }}
{{- $claims := dig "spec" "volumeClaimTemplates" list $sts }}
{{- if ne (gt (len $claims) 0) $wanted.enabled }}
{{- fail (printf "redis.persistence.enabled cannot change from %v to %v on an existing release: %s" (gt (len $claims) 0) $wanted.enabled $runbook) }}
{{- end }}
{{- with $claims }}
{{- $claim := (first .).spec }}
{{- $size := dig "resources" "requests" "storage" "" $claim }}
{{- if ne (include "lockgate.bytes" $size) (include "lockgate.bytes" $wanted.size) }}
{{- fail (printf "redis.persistence.size cannot change from %s to %s on an existing release: %s" $size $wanted.size $runbook) }}
{{- end }}
{{- $class := $claim.storageClassName | default "" }}
{{- if ne $class $wanted.storageClass }}
{{- fail (printf "redis.persistence.storageClass cannot change from %q to %q on an existing release: %s" $class $wanted.storageClass $runbook) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* The gateway's worker API as workers reach it (the operator hands it to them): the
Service's `worker` port when gateway.workerPort is set, else the job API's URL. */}}
{{- define "lockgate.gateway.workerUrl" -}}
{{- if .Values.gateway.workerPort }}
{{- printf "http://%s.%s.svc.%s:%d" (include "lockgate.gateway.fullname" .) .Release.Namespace .Values.clusterDomain (int .Values.gateway.service.workerPort) }}
{{- else }}
{{- include "lockgate.gateway.internalUrl" . }}
{{- end }}
{{- end }}

{{/* The management API's rules in the namespace it writes Endpoints into
(kube/controlplane.py KubernetesControlPlane: create, get, list, patch, delete). */}}
{{- define "lockgate.manage.rules" -}}
- apiGroups: [lockgate.dev]
  resources: [endpoints]
  verbs: [get, list, create, patch, delete]
- apiGroups: [lockgate.dev]
  resources: [templates]
  verbs: [get, list, create, patch, delete]
{{- end }}

{{/* A helper image of the operator's (operator.helperImages.*): `repository:tag@digest`,
or `repository:tag` without a digest. */}}
{{- define "lockgate.helperImage" -}}
{{- printf "%s:%s" .repository (toString .tag) }}{{ with .digest }}@{{ . }}{{ end }}
{{- end }}

{{/* -- Redis connection: how the gateway, operator and management API reach Redis
(LOCKGATE_REDIS_*, operator/lockgate/store/connection.py) -- */}}

{{/* Which Redis the components use: `chart` (the chart's one pod), `chart-sentinel` (the
chart's Sentinel set), or externalRedis's `url`, `cluster` or `sentinel`; `url` also when
only settings.existingSecret names it (its LOCKGATE_REDIS_URL). */}}
{{- define "lockgate.redis.mode" -}}
{{- $ext := .Values.externalRedis }}
{{- if .Values.redis.enabled }}{{ ternary "chart-sentinel" "chart" .Values.redis.sentinel.enabled }}
{{- else if $ext.clusterNodes }}cluster
{{- else if $ext.sentinels }}sentinel
{{- else }}url
{{- end }}
{{- end }}

{{/* The sentinels of the chart's Sentinel set: each pod's stable name under the headless
Service, which a restarted pod keeps. */}}
{{- define "lockgate.redis.sentinelNodes" -}}
{{- $nodes := list }}
{{- range $i := until (int .Values.redis.sentinel.replicas) }}
{{- $nodes = append $nodes (printf "%s:%d" (include "lockgate.redis.podHost" (dict "ctx" $ "index" $i)) (int $.Values.redis.sentinel.port)) }}
{{- end }}
{{- join "," $nodes }}
{{- end }}
{{/* One Redis pod's DNS name (call with dict "ctx" . "index" i). */}}
{{- define "lockgate.redis.podHost" -}}
{{- printf "%s-%d.%s.%s.svc.%s" (include "lockgate.redis.fullname" .ctx) (int .index) (include "lockgate.redis.headlessName" .ctx) .ctx.Release.Namespace .ctx.Values.clusterDomain }}
{{- end }}

{{/* The external Redis password's source as a secretKeyRef (`name`, `key`), or empty:
externalRedis.existingSecret, else the settings Secret when externalRedis.password is given.
`which` is "" for the servers' password, "Sentinel" for the sentinels'. */}}
{{- define "lockgate.redis.externalPasswordRef" -}}
{{- $ext := .ctx.Values.externalRedis }}
{{- $key := ternary $ext.existingSecretSentinelPasswordKey $ext.existingSecretPasswordKey (eq .which "Sentinel") }}
{{- $given := ternary $ext.sentinelPassword $ext.password (eq .which "Sentinel") }}
{{- if and $ext.existingSecret $key }}{{ dict "name" $ext.existingSecret "key" $key | toJson }}
{{- else if $given }}{{ dict "name" (include "lockgate.settingsSecretName" .ctx) "key" (printf "LOCKGATE_REDIS_%sPASSWORD" (ternary "SENTINEL_" "" (eq .which "Sentinel"))) | toJson }}
{{- end }}
{{- end }}

{{/* One env variable from a secretKeyRef given as JSON (see above); nothing when empty. */}}
{{- define "lockgate.redis.secretEnv" -}}
{{- if .ref }}{{ with .ref | fromJson }}
- name: {{ $.name }}
  valueFrom:
    secretKeyRef:
      name: {{ .name }}
      key: {{ .key }}
{{- end }}{{ end }}
{{- end }}

{{/* Where the Redis CA bundle is mounted (externalRedis.tls.existingSecret). */}}
{{- define "lockgate.redis.tlsDir" -}}/etc/lockgate/redis-tls{{- end }}

{{/* The LOCKGATE_REDIS_* environment of the gateway, the operator and the management API:
the same in all three, whatever the mode. */}}
{{- define "lockgate.redis.env" -}}
{{- $mode := include "lockgate.redis.mode" . }}
{{- $ext := .Values.externalRedis }}
{{- $settings := include "lockgate.settingsSecretName" . }}
{{- if has $mode (list "chart" "url") }}
- name: LOCKGATE_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ $settings }}
      key: LOCKGATE_REDIS_URL
{{- else if eq $mode "cluster" }}
- name: LOCKGATE_REDIS_CLUSTER_NODES
  value: {{ $ext.clusterNodes | quote }}
{{- else }}
- name: LOCKGATE_REDIS_SENTINELS
  value: {{ ternary (include "lockgate.redis.sentinelNodes" .) $ext.sentinels (eq $mode "chart-sentinel") | quote }}
- name: LOCKGATE_REDIS_SENTINEL_MASTER
  value: {{ ternary .Values.redis.sentinel.masterName $ext.sentinelMaster (eq $mode "chart-sentinel") | quote }}
{{- end }}
{{- if eq $mode "chart-sentinel" }}
{{- if .Values.redis.auth.enabled }}
{{- /* The servers and the sentinels share the chart's one password. */}}
{{- range $name := list "LOCKGATE_REDIS_PASSWORD" "LOCKGATE_REDIS_SENTINEL_PASSWORD" }}
{{- include "lockgate.redis.secretEnv" (dict "name" $name "ref" (dict "name" $settings "key" "REDIS_PASSWORD" | toJson)) }}
{{- end }}
{{- end }}
{{- with .Values.redis.sentinel.minReplicasAck }}
- name: LOCKGATE_REDIS_MIN_REPLICAS_ACK
  value: {{ include "lockgate.envValue" . }}
{{- end }}
{{- else if ne $mode "chart" }}
{{- with $ext.username }}
- name: LOCKGATE_REDIS_USERNAME
  value: {{ . | quote }}
{{- end }}
{{- include "lockgate.redis.secretEnv" (dict "name" "LOCKGATE_REDIS_PASSWORD" "ref" (include "lockgate.redis.externalPasswordRef" (dict "ctx" . "which" ""))) }}
{{- if eq $mode "sentinel" }}
{{- with $ext.sentinelUsername }}
- name: LOCKGATE_REDIS_SENTINEL_USERNAME
  value: {{ . | quote }}
{{- end }}
{{- include "lockgate.redis.secretEnv" (dict "name" "LOCKGATE_REDIS_SENTINEL_PASSWORD" "ref" (include "lockgate.redis.externalPasswordRef" (dict "ctx" . "which" "Sentinel"))) }}
{{- end }}
{{- if $ext.tls.enabled }}
- name: LOCKGATE_REDIS_TLS
  value: "true"
{{- if $ext.tls.existingSecret }}
- name: LOCKGATE_REDIS_TLS_CA_FILE
  value: {{ printf "%s/%s" (include "lockgate.redis.tlsDir" .) $ext.tls.caKey | quote }}
{{- end }}
{{- end }}
{{- with $ext.minReplicasAck }}
- name: LOCKGATE_REDIS_MIN_REPLICAS_ACK
  value: {{ include "lockgate.envValue" . }}
{{- end }}
{{- end }}
{{- end }}

{{/* The CA bundle's volume and its read-only mount, beside lockgate.redis.env; nothing
without externalRedis.tls.existingSecret. */}}
{{- define "lockgate.redis.volume" -}}
{{- with .Values.externalRedis.tls }}
{{- if and .enabled .existingSecret (not $.Values.redis.enabled) }}
- name: redis-tls
  secret:
    secretName: {{ .existingSecret }}
    items:
      - key: {{ .caKey }}
        path: {{ .caKey }}
{{- end }}
{{- end }}
{{- end }}
{{- define "lockgate.redis.volumeMount" -}}
{{- if include "lockgate.redis.volume" . }}
- name: redis-tls
  mountPath: {{ include "lockgate.redis.tlsDir" . }}
  readOnly: true
{{- end }}
{{- end }}

{{/* Refuse Redis settings that contradict each other, naming the values at fault. */}}
{{- define "lockgate.redis.validate" -}}
{{- $ext := .Values.externalRedis }}
{{- $modes := list }}
{{- range $key := list "url" "clusterNodes" "sentinels" }}
{{- if index $ext $key }}{{ $modes = append $modes (printf "externalRedis.%s" $key) }}{{ end }}
{{- end }}
{{- if .Values.redis.enabled }}
{{- range $key := list "url" "clusterNodes" "sentinels" "sentinelMaster" "password" "existingSecret" }}
{{- if index $ext $key }}
{{- fail (printf "externalRedis.%s is for an external Redis: set it only with redis.enabled=false" $key) }}
{{- end }}
{{- end }}
{{- else }}
{{- if gt (len $modes) 1 }}
{{- fail (printf "give one external Redis mode, not %s: url (standalone), clusterNodes (Redis Cluster) or sentinels (Sentinel)" (join " and " $modes)) }}
{{- end }}
{{- if and (not $modes) (not .Values.settings.existingSecret) }}
{{- fail "redis.enabled=false needs externalRedis.url, externalRedis.clusterNodes or externalRedis.sentinels (or settings.existingSecret holding LOCKGATE_REDIS_URL)" }}
{{- end }}
{{- if and $ext.sentinels (not $ext.sentinelMaster) }}
{{- fail "externalRedis.sentinels needs externalRedis.sentinelMaster: the name the sentinels monitor the master set as" }}
{{- end }}
{{- if and $ext.sentinelMaster (not $ext.sentinels) }}
{{- fail "externalRedis.sentinelMaster needs externalRedis.sentinels (host:port,... of the sentinels)" }}
{{- end }}
{{- if and $ext.password $ext.existingSecret }}
{{- fail "give externalRedis.password or externalRedis.existingSecret, not both" }}
{{- end }}
{{- if and (or $ext.sentinelPassword $ext.existingSecretSentinelPasswordKey) (not $ext.sentinels) }}
{{- fail "externalRedis.sentinelPassword and existingSecretSentinelPasswordKey are for externalRedis.sentinels" }}
{{- end }}
{{- if and $ext.sentinelPassword $ext.existingSecret }}
{{- fail "give externalRedis.sentinelPassword or externalRedis.existingSecret (with existingSecretSentinelPasswordKey), not both" }}
{{- end }}
{{- if and $ext.existingSecretSentinelPasswordKey (not $ext.existingSecret) }}
{{- fail "externalRedis.existingSecretSentinelPasswordKey needs externalRedis.existingSecret" }}
{{- end }}
{{- if and .Values.settings.existingSecret $ext.url }}
{{- fail "externalRedis.url goes into the chart's settings Secret, which settings.existingSecret replaces: put LOCKGATE_REDIS_URL in that Secret instead" }}
{{- end }}
{{- if and .Values.settings.existingSecret (or $ext.password $ext.sentinelPassword) }}
{{- fail "externalRedis.password and sentinelPassword go into the chart's settings Secret, which settings.existingSecret replaces: give externalRedis.existingSecret instead" }}
{{- end }}
{{- if and $ext.tls.existingSecret (not $ext.tls.enabled) }}
{{- fail "externalRedis.tls.existingSecret needs externalRedis.tls.enabled=true" }}
{{- end }}
{{- if and $ext.tls.enabled $ext.url (not (hasPrefix "rediss://" $ext.url)) }}
{{- fail "externalRedis.tls.enabled with externalRedis.url needs a rediss:// URL" }}
{{- end }}
{{- end }}
{{- if and .Values.redis.sentinel.enabled (gt (int .Values.redis.sentinel.quorum) (int .Values.redis.sentinel.replicas)) }}
{{- fail "redis.sentinel.quorum cannot exceed redis.sentinel.replicas: no failover could ever be agreed" }}
{{- end }}
{{- if and .Values.redis.sentinel.enabled (ge (int .Values.redis.sentinel.minReplicasAck) (int .Values.redis.sentinel.replicas)) }}
{{- fail "redis.sentinel.minReplicasAck must be below redis.sentinel.replicas (the replicas are replicas - 1 pods)" }}
{{- end }}
{{- end }}

{{/* The environment of the chart's Sentinel pods' start scripts (templates/redis/
configmap.yaml): their own stable name, their peers' names, and the password. */}}
{{- define "lockgate.redis.podEnv" -}}
- name: POD_NAME
  valueFrom:
    fieldRef: {fieldPath: metadata.name}
- name: STS
  value: {{ include "lockgate.redis.fullname" . | quote }}
- name: PEERS  # <pod>.$PEERS is a pod's name under the headless Service
  value: {{ printf "%s.%s.svc.%s" (include "lockgate.redis.headlessName" .) .Release.Namespace .Values.clusterDomain | quote }}
- name: ME
  value: "$(POD_NAME).$(PEERS)"
- name: REPLICAS
  value: {{ .Values.redis.sentinel.replicas | quote }}
{{- if .Values.redis.auth.enabled }}
- name: REDISCLI_AUTH
  valueFrom:
    secretKeyRef:
      name: {{ include "lockgate.settingsSecretName" . }}
      key: REDIS_PASSWORD
{{- end }}
{{- end }}

{{/* How nodes are read (operator.scheduling): GPU types, CUDA, data centers, CPU flavors.
The operator places workers by these labels; the management API's catalog
(/v2/catalog) reads the same nodes back with them (docs/catalog.md). */}}
{{- define "lockgate.nodeLabelsEnv" -}}
{{- with .Values.operator.scheduling }}
- name: LOCKGATE_GPU_RESOURCE
  value: {{ .gpuResource | quote }}
{{- /* GPU placement (docs/endpoint-reference.md#gpu-placement) */}}
{{- if and (eq .gpuLabels "custom") (not .gpuTypeLabel) }}
{{- fail "operator.scheduling.gpuLabels is custom: set operator.scheduling.gpuTypeLabel to the node label naming GPU types" }}
{{- end }}
- name: LOCKGATE_GPU_LABELS
  value: {{ .gpuLabels | quote }}
- name: LOCKGATE_GPU_TYPE_LABEL
  value: {{ .gpuTypeLabel | quote }}
- name: LOCKGATE_GPU_PRESENT_LABEL
  value: {{ .gpuPresentLabel | quote }}
- name: LOCKGATE_GPU_TYPE_VALUES
  value: {{ toJson .gpuTypeValues | quote }}
- name: LOCKGATE_CUDA_MAJOR_LABEL
  value: {{ .cudaMajorLabel | quote }}
- name: LOCKGATE_CUDA_MINOR_LABEL
  value: {{ .cudaMinorLabel | quote }}
- name: LOCKGATE_DATACENTER_LABEL
  value: {{ .datacenterLabel | quote }}
- name: LOCKGATE_CPU_FLAVOR_LABEL
  value: {{ .cpuFlavorLabel | quote }}
{{- end }}
{{- end }}

{{/* In-cluster builds (builds.*, docs/builds.md): the settings the operator (which makes
the build Jobs) and the management API (which answers 501 without a registry) read. */}}
{{- define "lockgate.builds.env" -}}
{{- with .Values.builds }}
{{- if .registry }}
- name: LOCKGATE_BUILDS_REGISTRY
  value: {{ .registry | quote }}
- name: LOCKGATE_BUILDS_NAMESPACE
  value: {{ .namespace | quote }}
- name: LOCKGATE_BUILDS_PUSH_SECRET
  value: {{ .pushSecret | quote }}
- name: LOCKGATE_BUILDS_INSECURE_REGISTRY
  value: {{ include "lockgate.envValue" .insecureRegistry }}
- name: LOCKGATE_BUILDER_IMAGE
  {{- if .image.digest }}
  value: {{ printf "%s@%s" .image.repository .image.digest | quote }}
  {{- else }}
  value: {{ printf "%s:%s" .image.repository (default $.Chart.AppVersion .image.tag) | quote }}
  {{- end }}
- name: LOCKGATE_BUILDS_TTL_S
  value: {{ include "lockgate.envValue" .ttlSecondsAfterFinished }}
- name: LOCKGATE_BUILDS_RESOURCES
  value: {{ toJson .resources | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/* builds.namespace must be watched by a namespaced operator: it follows the build
Jobs there. */}}
{{- define "lockgate.validate.builds" -}}
{{- with .Values.builds }}
{{- if and .registry .namespace $.Values.operator.namespaces (not (has .namespace $.Values.operator.namespaces)) }}
{{- fail (printf "builds.namespace %q is not among operator.namespaces %v: the operator would not see its build Jobs; add it to operator.namespaces" .namespace $.Values.operator.namespaces) }}
{{- end }}
{{- end }}
{{- end }}
