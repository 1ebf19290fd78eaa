{{- define "triton-tts.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "triton-tts.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "triton-tts.selectorLabels" -}}
app.kubernetes.io/name: {{ include "triton-tts.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "triton-tts.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "triton-tts.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: inference-server
app.kubernetes.io/part-of: triton-tts
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "triton-tts.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "triton-tts.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "triton-tts.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "triton-tts.usesGpu" -}}
{{- if ne .Values.variant "cpu" -}}true{{- end -}}
{{- end -}}

{{/* Where Triton finds the repository, for each source. */}}
{{- define "triton-tts.repositoryPath" -}}
{{- $source := .Values.modelRepository.source -}}
{{- if eq $source "objectStorage" -}}
{{- .Values.modelRepository.objectStorage.uri -}}
{{- else if eq $source "pvc" -}}
{{- printf "/models/%s" .Values.modelRepository.pvc.subPath | trimSuffix "/" -}}
{{- else -}}
/models/repository
{{- end -}}
{{- end -}}

{{- define "triton-tts.gpuResources" -}}
{{- if include "triton-tts.usesGpu" . }}
{{ .Values.gpu.resourceName }}: {{ .Values.gpu.count }}
{{- end -}}
{{- end -}}

{{/* Container resources; GPU variants add the GPU to requests and limits. */}}
{{- define "triton-tts.resources" -}}
{{- $res := deepCopy (default dict .Values.resources) -}}
{{- if and (include "triton-tts.usesGpu" .) (or (not .init) (eq .Values.variant "tensorrt")) -}}
{{- $requests := default dict $res.requests -}}
{{- $limits := default dict $res.limits -}}
{{- $_ := set $requests .Values.gpu.resourceName (toString .Values.gpu.count) -}}
{{- $_ := set $limits .Values.gpu.resourceName (toString .Values.gpu.count) -}}
{{- $_ := set $res "requests" $requests -}}
{{- $_ := set $res "limits" $limits -}}
{{- end -}}
{{- toYaml $res -}}
{{- end -}}

{{/* The GPU taint's toleration (GPU variants) and the user's own, without duplicates. */}}
{{- define "triton-tts.tolerations" -}}
{{- $all := list -}}
{{- if include "triton-tts.usesGpu" . -}}
{{- $all = concat $all .Values.gpu.tolerations -}}
{{- end -}}
{{- $all = concat $all .Values.tolerations | uniq -}}
{{- if $all -}}
{{- toYaml $all -}}
{{- end -}}
{{- end -}}

{{/* Recreate takes no rollingUpdate block (values merge the default's into it). */}}
{{- define "triton-tts.strategy" -}}
{{- if eq .Values.strategy.type "Recreate" -}}
type: Recreate
{{- else -}}
{{- $r := .Values.strategy.rollingUpdate -}}
{{- if and (has (toString $r.maxSurge) (list "0" "0%")) (has (toString $r.maxUnavailable) (list "0" "0%")) -}}
{{- fail "strategy.rollingUpdate: maxSurge and maxUnavailable cannot both be 0 (no pod could ever be replaced)" -}}
{{- end -}}
type: RollingUpdate
rollingUpdate:
  maxSurge: {{ .Values.strategy.rollingUpdate.maxSurge | toJson }}
  maxUnavailable: {{ .Values.strategy.rollingUpdate.maxUnavailable | toJson }}
{{- end -}}
{{- end -}}

{{- define "triton-tts.engineCachePath" -}}/engine-cache{{- end -}}

{{/* `triton-tts build-repo` flags, one per build value: maxBatchSize -> --max-batch-size
(the values are the CLI's options; the schema keeps out any other key). */}}
{{- define "triton-tts.buildFlags" -}}
{{- range $name, $value := .Values.build }} \
  --{{ kebabcase $name }}
{{- if kindIs "slice" $value }}{{ range $value }} {{ int64 . }}{{ end }}
{{- else if kindIs "string" $value }} {{ squote $value }}
{{- else }} {{ int64 $value }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The export init container's script: voice -> repository (-> TensorRT engines). */}}
{{- define "triton-tts.exportScript" -}}
set -eu
triton-tts export piper --out /models/voices/{{ .Values.modelRepository.export.voice }}
triton-tts build-repo --voice /models/voices/{{ .Values.modelRepository.export.voice }} --out /models/repository
{{- include "triton-tts.buildFlags" . }}
{{- range .Values.lexicons }} \
  --lexicon {{ .language | default "en" }}=/lexicons/{{ .name }}.tsv
{{- end }}
{{- if eq .Values.variant "tensorrt" }}
python3 -m triton_tts.export.tensorrt --repo /models/repository --max-batch-size {{ int64 .Values.build.maxBatchSize }} --trtexec {{ .Values.modelRepository.export.trtexec }}
{{- if .Values.engineCache.enabled }} --cache-dir {{ include "triton-tts.engineCachePath" . }}{{ end }}
{{- end }}
{{- end -}}
