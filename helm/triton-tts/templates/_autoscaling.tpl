{{/*
The autoscaling signal, defined once: the recording rule below is rendered into the
PrometheusRule (prometheus-operator) and into the plain rules file of the
prometheus-adapter ConfigMap; the adapter rule and the HPA only name the series.

Average queue time per request at the stage models, per pod:

  sum(rate(nv_inference_queue_duration_us{stages}[1m]))
  / sum(rate(nv_inference_request_success{stages}[1m]))

Why the stages (preprocess, acoustic, vocoder, postprocess and their __<voice> copies):
every entry model (tts, tts_stream, tts_chunk called directly) sends its work through
them, one request per text chunk and stage, so the signal holds for any mix of traffic
and numerator and denominator count the same requests. The entry models are left out:
tts and tts_stream are BLS models (tts_stream decoupled) that wait on the stages inside
their own execution, and tts_chunk is an ensemble; their counters do not measure queueing
in the same units. An idle pod (0/0) reads 0: the division only keeps pods that finished
a stage request in the window, and `or` gives every other pod with stage counters 0.
*/}}
{{- define "triton-tts.queueSeries" -}}triton_tts:stage_queue_us_per_request:rate1m{{- end -}}
{{- define "triton-tts.queueCustomMetric" -}}triton_tts_stage_queue_us_per_request{{- end -}}
{{- define "triton-tts.gpuCustomMetric" -}}triton_tts_gpu_utilization_percent{{- end -}}

{{- define "triton-tts.stageModelRegex" -}}(preprocess|acoustic|vocoder|postprocess)(__.+)?{{- end -}}

{{/*
This release's pods only, so that two releases (blue/green) recording the same series
name never write the same series. A Deployment's pods are named
<deployment>-<template hash>-<5 random>; the API server keeps only the first 58
characters before the random part, so names over 46 characters get a looser match.
*/}}
{{- define "triton-tts.podRegex" -}}
{{- $name := include "triton-tts.fullname" . -}}
{{- if le (len $name) 46 -}}
{{ regexQuoteMeta $name }}-[a-z0-9]+-[a-z0-9]+
{{- else -}}
{{ regexQuoteMeta (trunc 58 $name) }}[a-z0-9-]*
{{- end -}}
{{- end -}}

{{- define "triton-tts.recordingRuleGroups" -}}
{{- $stages := printf "namespace=%q, pod=~%q, model=~%q" .Release.Namespace (include "triton-tts.podRegex" .) (include "triton-tts.stageModelRegex" .) -}}
{{- $requests := printf "sum by (namespace, pod) (rate(nv_inference_request_success{%s}[1m]))" $stages -}}
groups:
  - name: {{ include "triton-tts.fullname" . }}.autoscaling
    rules:
      - record: {{ include "triton-tts.queueSeries" . }}
        expr: |-
          (
            sum by (namespace, pod) (rate(nv_inference_queue_duration_us{ {{- $stages -}} }[1m]))
            / ({{ $requests }} > 0)
          )
          or
          {{ $requests }} * 0
{{- end -}}
