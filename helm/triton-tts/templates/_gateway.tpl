{{/*
The OpenAI-compatible gateway (`triton-tts gateway`, the same image with its entry point
overridden): a second container in the Triton pod (mode sidecar) or its own Deployment
and Service (mode deployment).
*/}}

{{- define "triton-tts.gatewayMode" -}}
{{- if .Values.gateway.enabled -}}{{ .Values.gateway.mode }}{{- end -}}
{{- end -}}

{{- define "triton-tts.gatewayFullname" -}}
{{- printf "%s-gateway" (include "triton-tts.fullname" . | trunc 55 | trimSuffix "-") -}}
{{- end -}}

{{/* Gateway pods carry their own app name: the Triton Deployment's selector (immutable)
and Service's select name + instance, and must never pick up gateway pods. */}}
{{- define "triton-tts.gatewaySelectorLabels" -}}
app.kubernetes.io/name: {{ include "triton-tts.name" . }}-gateway
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "triton-tts.gatewayLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "triton-tts.gatewaySelectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: gateway
app.kubernetes.io/part-of: triton-tts
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Where the gateway reaches Triton's gRPC endpoint: the pod's own Triton over localhost
(sidecar), or every ready Triton pod through a headless Service (deployment): the gateway
resolves dns:/// to the pods' addresses and spreads its calls over them (round robin),
where a ClusterIP Service would pin each gateway's one connection to one pod. */}}
{{- define "triton-tts.gatewayTritonUrl" -}}
{{- if eq .Values.gateway.mode "sidecar" -}}
{{- printf "localhost:%d" (int .Values.triton.grpcPort) -}}
{{- else -}}
{{- printf "dns:///%s.%s.svc:%d" (include "triton-tts.gatewayTritonPods" .) .Release.Namespace (int .Values.triton.grpcPort) -}}
{{- end -}}
{{- end -}}

{{/* The pods whose /metrics carry the gateway's series (triton_tts_gateway_*): Triton's
own (sidecar), or the gateway Deployment's, named like Triton's (triton-tts.podRegex). */}}
{{- define "triton-tts.gatewayPodRegex" -}}
{{- if eq .Values.gateway.mode "sidecar" -}}
{{ include "triton-tts.podRegex" . }}
{{- else -}}
{{- $name := include "triton-tts.gatewayFullname" . -}}
{{- if le (len $name) 46 -}}
{{ regexQuoteMeta $name }}-[a-z0-9]+-[a-z0-9]+
{{- else -}}
{{ regexQuoteMeta (trunc 58 $name) }}[a-z0-9-]*
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "triton-tts.gatewayTritonPods" -}}
{{- printf "%s-grpc-pods" (include "triton-tts.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "triton-tts.gatewayGracefulTimeout" -}}
{{- max 1 (sub (sub (int .Values.terminationGracePeriodSeconds) (int .Values.preStopSleepSeconds)) 5) -}}
{{- end -}}

{{- define "triton-tts.gatewayContainer" -}}
{{- $g := .Values.gateway -}}
{{- if eq $g.mode "sidecar" -}}
{{- $t := .Values.triton -}}
{{- if has (int $g.port) (list (int $t.httpPort) (int $t.grpcPort) (int $t.metricsPort) (int $t.healthPort)) -}}
{{- fail (printf "gateway.port %d is taken by Triton in the same pod (triton.*Port): pick another" (int $g.port)) -}}
{{- end -}}
{{- end -}}
- name: gateway
  image: {{ include "triton-tts.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  # The image's entry point runs Triton; this container runs the gateway instead.
  command: ["triton-tts", "gateway"]
  args:
    - --triton-url={{ include "triton-tts.gatewayTritonUrl" . }}
    - --host=0.0.0.0
    - --port={{ int64 $g.port }}
    - --max-input-chars={{ int64 $g.maxInputChars }}
    # After SIGTERM (once preStop has slept), responses and sockets in flight get what is
    # left of the grace period, less 5 s to close the rest cleanly before the kubelet's SIGKILL.
    - --graceful-timeout-s={{ include "triton-tts.gatewayGracefulTimeout" . }}
    {{- range $g.corsOrigins }}
    - {{ printf "--cors-origin=%s" . | quote }}
    {{- end }}
    {{- range $g.extraArgs }}
    - {{ . | quote }}
    {{- end }}
  {{- if $g.apiKeySecret.name }}
  env:
    - name: TRITON_TTS_API_KEY
      valueFrom:
        secretKeyRef:
          name: {{ $g.apiKeySecret.name }}
          key: {{ $g.apiKeySecret.key }}
  {{- end }}
  ports:
    - { name: gateway, containerPort: {{ int64 $g.port }}, protocol: TCP }
  # /health/live: the process serves; /health/ready: Triton and its tts_stream model are
  # ready (over the gRPC URL above).
  livenessProbe:
    httpGet: { path: /health/live, port: gateway }
    {{- toYaml $g.probes.liveness | nindent 4 }}
  readinessProbe:
    httpGet: { path: /health/ready, port: gateway }
    {{- toYaml $g.probes.readiness | nindent 4 }}
  # Out of the endpoints first, like Triton; then SIGTERM: uvicorn finishes the responses
  # in flight while Triton, stopping at the same time, drains the requests they wait on.
  lifecycle:
    preStop:
      exec:
        command: ["sleep", "{{ .Values.preStopSleepSeconds }}"]
  securityContext:
    {{- toYaml .Values.securityContext | nindent 4 }}
  resources:
    {{- toYaml $g.resources | nindent 4 }}
  volumeMounts:
    - { name: gateway-tmp, mountPath: /tmp }
{{- end -}}
