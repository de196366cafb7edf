{{/*
The name of every object the chart makes: the host is one per cluster (its
CRDs, ClusterRole and webhook are cluster-wide), so names are fixed and do not
carry the release name.
*/}}
{{- define "wasm-operator.name" -}}
wasm-operator
{{- end -}}

{{/* Labels on every object. */}}
{{- define "wasm-operator.labels" -}}
app.kubernetes.io/name: {{ include "wasm-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Labels that select the host's Pods (never change them: selectors are immutable). */}}
{{- define "wasm-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "wasm-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The host's image. */}}
{{- define "wasm-operator.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The restricted securityContext of every container the chart runs. */}}
{{- define "wasm-operator.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* The Pod securityContext (Pod Security Standards: restricted). */}}
{{- define "wasm-operator.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}
