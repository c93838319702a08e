{{/* The pre-delete hook (templates/hooks/uninstall-cleanup-*.yaml). */}}

{{/* Name of the hook's Job, ServiceAccount and Roles. */}}
{{- define "lockgate.uninstallHook.name" -}}
{{- printf "%s-uninstall-cleanup" (include "lockgate.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Cluster-scoped names carry the release namespace: two releases never share them. */}}
{{- define "lockgate.uninstallHook.clusterName" -}}
{{- include "lockgate.clusterScopedName" (dict "ctx" . "name" (printf "%s-uninstall-cleanup" (include "lockgate.fullname" .))) }}
{{- end }}

{{/* Hook annotations; call with (dict "weight" "-10"). Deleted once it succeeded, and
before a new run (a failed run's objects stay for `kubectl logs job/...`). */}}
{{- define "lockgate.uninstallHook.annotations" -}}
helm.sh/hook: pre-delete
helm.sh/hook-weight: {{ .weight | quote }}
helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
{{- end }}

{{/* The operator's namespaces as a JSON list (operator.namespaces plus endpointNamespace);
[] in cluster-wide mode, where the hook cleans every namespace. */}}
{{- define "lockgate.uninstallHook.namespaces" -}}
{{- $namespaces := .Values.operator.namespaces }}
{{- if and $namespaces .Values.operator.endpointNamespace }}
{{- $namespaces = append $namespaces .Values.operator.endpointNamespace }}
{{- end }}
{{- uniq $namespaces | toJson }}
{{- end }}

{{/* The labels of this release's kopf peering objects (templates/operator/peering.yaml). */}}
{{- define "lockgate.uninstallHook.peeringSelector" -}}
{{- with dict "ctx" . "component" "operator" -}}
app.kubernetes.io/name={{ include "lockgate.name" .ctx }},app.kubernetes.io/instance={{ .ctx.Release.Name }},app.kubernetes.io/component=operator
{{- end }}
{{- end }}

{{/* What the hook does in each of the operator's namespaces (a Role, or the ClusterRole). */}}
{{- define "lockgate.uninstallHook.rules" -}}
# The Endpoints' worker Deployments and flashboot DaemonSets, found by their labels.
- apiGroups: [apps]
  resources: [deployments, daemonsets]
  verbs: [list, delete]
# Remove the operator's lockgate.dev/cleanup finalizer (a patch; a get on conflict).
- apiGroups: [lockgate.dev]
  resources: [endpoints, templates]
  verbs: [list, get, patch]
{{- if .Values.operator.peering }}
# kopf's peering objects of the release (post-install hooks: helm would leave them).
- apiGroups: [kopf.dev]
  resources: [kopfpeerings]
  verbs: [list, delete]
{{- end }}
{{- if .Values.builds.registry }}
# The build Jobs (builds.registry): a running build stops, none is left behind.
- apiGroups: [batch]
  resources: [jobs]
  verbs: [list, delete]
{{- end }}
{{- end }}
