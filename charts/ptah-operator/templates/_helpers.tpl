{{/* The release's name for its objects: ptah-operator unless renamed. */}}
{{- define "ptah.fullname" -}}
{{- if contains "ptah-operator" .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-ptah-operator" .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "ptah.selectorLabels" -}}
app.kubernetes.io/name: ptah-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "ptah.labels" -}}
{{ include "ptah.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "ptah.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "ptah.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name: name the ServiceAccount to use when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "ptah.image" -}}
{{- printf "%s@%s" .repository .digest -}}
{{- end -}}

{{/* The Secret with tls.crt, tls.key and ca.crt. */}}
{{- define "ptah.tlsSecret" -}}
{{- if eq .Values.certificates.source "secret" -}}
{{- required "certificates.secretName: name the Secret (tls.crt, tls.key, ca.crt) when certificates.source is secret" .Values.certificates.secretName -}}
{{- else -}}
{{- printf "%s-tls" (include "ptah.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "ptah.tokenKeySecret" -}}
{{- default (printf "%s-token-key" (include "ptah.fullname" .)) .Values.tokenKey.existingSecret -}}
{{- end -}}

{{/* The Service's DNS name, which the certificate names. */}}
{{- define "ptah.serviceHost" -}}
{{- printf "%s.%s.svc" (include "ptah.fullname" .) .Release.Namespace -}}
{{- end -}}

{{/* The kinds admission stamps, as webhook and policy rules name them. */}}
{{- define "ptah.reviewedResources" -}}
- ptahschemaapprovals
- ptahmigrationapprovals
- ptahmigrationrunacknowledgments
{{- end -}}

{{/* A webhook's clientConfig: the Service, a path, the CA if known. */}}
{{- define "ptah.webhookClient" -}}
service:
  name: {{ include "ptah.fullname" .root }}
  namespace: {{ .root.Release.Namespace }}
  port: {{ .root.Values.ports.https }}
  path: {{ .path }}
{{- with .caBundle }}
caBundle: {{ . }}
{{- end -}}
{{- end -}}
