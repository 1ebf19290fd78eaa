{{/*
The autoscaling signals, each defined once: the recording rules below are rendered into
the PrometheusRule (prometheus-operator) and into the plain rules file of the
prometheus-adapter ConfigMap; the adapter rules and the HPA only name the series. Both are
always recorded and exposed, so that switching autoscaling.signal changes the HPA only.

1. Queue time (autoscaling.signal: queueTime). Average queue time per request at the
   stage models, per pod:

     sum(rate(nv_inference_queue_duration_us{stages}[1m]))
     / sum(rate(nv_inference_request_success{stages}[1m]))

   Why the stages (preprocess, acoustic, vocoder, postprocess and their __<voice>
   copies): every entry model (tts, tts_stream, tts_chunk called directly) sends its work
   through them, one request per text chunk and stage, so the signal holds for any mix of
   traffic and numerator and denominator count the same requests. The entry models are
   left out: tts and tts_stream are BLS models (tts_stream decoupled) that wait on the
   stages inside their own execution, and tts_chunk is an ensemble; their counters do not
   measure queueing in the same units. An idle pod (0/0) reads 0: the division only keeps
   pods that finished a stage request in the window, and `or` gives every other pod with
   stage counters 0.

2. Demand over capacity (autoscaling.signal: demand). The audio asked of the pod per
   second over the audio it makes per second when busy, summed over its voices:

     sum over voice of
       sum(rate(triton_tts_demanded_audio_seconds_total[1m]))   (every instance, both outcomes)
       / max(triton_tts_capacity_audio_seconds_per_second)      (one ledger: max over instances)

   1 is a pod asked for exactly what it can make; the HPA's proportional rule then asks
   for demand / target pods (admission refuses what a pod cannot make, so queue time
   stops growing with demand; refused demand is still demand, and is counted). Both
   series come from tts and tts_stream (triton_tts/runtime/metrics.py): the demanded counter is
   each instance's own requests (sum), the capacity gauge the server's admission ledger,
   the same in every instance's series (max, never sum). A voice whose capacity is not
   published yet (an instance publishes it after its first execute), or is 0, drops out;
   a pod with none of them, or no traffic, reads 0 (`or`: its demanded counters exist
   from load on).
*/}}
{{- define "triton-tts.queueSeries" -}}triton_tts:stage_queue_us_per_request:rate1m{{- end -}}
{{- define "triton-tts.queueCustomMetric" -}}triton_tts_stage_queue_us_per_request{{- end -}}
{{- define "triton-tts.demandSeries" -}}triton_tts:demand_capacity_ratio:rate1m{{- end -}}
{{- define "triton-tts.demandCustomMetric" -}}triton_tts_demand_capacity_ratio{{- end -}}
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
{{- $pods := printf "namespace=%q, pod=~%q" .Release.Namespace (include "triton-tts.podRegex" .) -}}
{{- $stages := printf "%s, model=~%q" $pods (include "triton-tts.stageModelRegex" .) -}}
{{- $requests := printf "sum by (namespace, pod) (rate(nv_inference_request_success{%s}[1m]))" $stages -}}
{{- $demanded := printf "rate(triton_tts_demanded_audio_seconds_total{%s}[1m])" $pods -}}
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
      - record: {{ include "triton-tts.demandSeries" . }}
        expr: |-
          sum by (namespace, pod) (
            sum by (namespace, pod, voice) ({{ $demanded }})
            / on (namespace, pod, voice)
            (max by (namespace, pod, voice) (triton_tts_capacity_audio_seconds_per_second{ {{- $pods -}} }) > 0)
          )
          or
          sum by (namespace, pod) ({{ $demanded }}) * 0
{{- end -}}
