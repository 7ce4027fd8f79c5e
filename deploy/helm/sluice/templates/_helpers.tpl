{{/* The name of an object of component c: <release>-<chart>-<c>, at most 63 characters. */}}
{{- define "sluice.name" -}}
{{- $base := .root.Release.Name -}}
{{- if not (contains .root.Chart.Name $base) -}}{{- $base = printf "%s-%s" $base .root.Chart.Name -}}{{- end -}}
{{- printf "%s-%s" $base .c | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "sluice.labels" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .c }}
app.kubernetes.io/version: {{ .root.Values.image.tag | default .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{- define "sluice.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .c }}
{{- end -}}

{{- define "sluice.image" -}}
{{- $repo := .repository -}}
{{- with .root.Values.image.registry }}{{ $repo = printf "%s/%s" . $repo }}{{ end -}}
{{- printf "%s:%s" $repo (.root.Values.image.tag | default .root.Chart.AppVersion) -}}
{{- end -}}

{{- define "sluice.securityContext" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  runAsGroup: 65532
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop: [ALL]
  seccompProfile:
    type: RuntimeDefault
{{- end -}}
