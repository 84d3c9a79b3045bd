{{/* The release's name for its objects, within the 63 characters a label allows. */}}
{{- define "srap.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "srap.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The pods of one role; dict: root, role. */}}
{{- define "srap.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .role }}
{{- end -}}

{{- define "srap.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{- define "srap.pskSecret" -}}
{{- .Values.psk.existingSecret | default (printf "%s-psk" (include "srap.fullname" .)) -}}
{{- end -}}

{{/*
One value as TOML: a string quoted (JSON's escapes are TOML's), a list
in brackets, a number as the integer every numeric key of sender.toml is
(Helm reads a YAML number as a float), a boolean as itself.
*/}}
{{- define "srap.tomlValue" -}}
{{- if kindIs "string" . -}}
{{- toJson . -}}
{{- else if kindIs "slice" . -}}
[{{ range $i, $v := . }}{{ if $i }}, {{ end }}{{ include "srap.tomlValue" $v }}{{ end }}]
{{- else if kindIs "bool" . -}}
{{- . -}}
{{- else if or (kindIs "float64" .) (kindIs "int64" .) (kindIs "int" .) -}}
{{- int64 . -}}
{{- else -}}
{{- fail (printf "sender.settings: %v is neither a string, a number, a boolean nor a list" .) -}}
{{- end -}}
{{- end -}}

{{/* `key = value` lines of a table, its null values left out. */}}
{{- define "srap.tomlKeys" -}}
{{- range $key, $value := . }}
{{- if not (kindIs "invalid" $value) }}
{{ $key }} = {{ include "srap.tomlValue" $value }}
{{- end }}
{{- end }}
{{- end -}}

{{/* sender.toml from sender.settings: the [[peer]] tables last, as TOML wants. */}}
{{- define "srap.senderToml" -}}
# sender.toml of `srap-agent sender --config`, rendered from the chart's
# sender.settings (deploy/etc/srap/sender.toml documents every key).
{{- include "srap.tomlKeys" (omit . "peer") }}
{{- range (.peer | default list) }}

[[peer]]
{{- include "srap.tomlKeys" . }}
{{- end }}
{{- end -}}

{{/* One flag's value as the command line takes it (numbers as integers). */}}
{{- define "srap.flagValue" -}}
{{- if or (kindIs "float64" .) (kindIs "int64" .) (kindIs "int" .) -}}
{{- int64 . -}}
{{- else -}}
{{- . -}}
{{- end -}}
{{- end -}}

{{/* A map of flags as container args: a list repeats its flag, true is a switch. */}}
{{- define "srap.flags" -}}
{{- range $key, $value := . }}
{{- if kindIs "slice" $value }}
{{- range $value }}
- {{ printf "--%s=%s" $key (include "srap.flagValue" .) | quote }}
{{- end }}
{{- else if kindIs "bool" $value }}
{{- if $value }}
- {{ printf "--%s" $key | quote }}
{{- end }}
{{- else if not (kindIs "invalid" $value) }}
- {{ printf "--%s=%s" $key (include "srap.flagValue" $value) | quote }}
{{- end }}
{{- end }}
{{- end -}}
