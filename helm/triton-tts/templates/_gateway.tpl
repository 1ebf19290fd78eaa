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

{{/* Riva's TTS API on the gateway's own port (gateway.riva): on with the gateway unless
riva.enabled is false. */}}
{{- define "triton-tts.rivaEnabled" -}}
{{- if and (include "triton-tts.gatewayMode" .) .Values.gateway.riva.enabled -}}true{{- end -}}
{{- end -}}

{{- define "triton-tts.rivaIngressName" -}}
{{- printf "%s-riva" (include "triton-tts.fullname" . | trunc 58 | trimSuffix "-") -}}
{{- end -}}

{{/* Where the riva.tls Secret (kubernetes.io/tls: tls.crt, tls.key) is mounted. */}}
{{- define "triton-tts.rivaTlsPath" -}}/etc/triton-tts/riva-tls{{- end -}}

{{/* The Service that carries the gateway's ports: the release's (sidecar) or its own. */}}
{{- define "triton-tts.gatewayService" -}}
{{- if eq .Values.gateway.mode "deployment" -}}
{{ include "triton-tts.gatewayFullname" . }}
{{- else -}}
{{ include "triton-tts.fullname" . }}
{{- end -}}
{{- end -}}

{{/* The gateway container's volumes, in whichever pod it runs. */}}
{{- define "triton-tts.gatewayVolumes" -}}
- name: gateway-tmp
  emptyDir: {}
{{- if and (include "triton-tts.rivaEnabled" .) .Values.gateway.riva.tls.secretName }}
- name: riva-tls
  secret:
    secretName: {{ .Values.gateway.riva.tls.secretName }}
{{- end }}
{{- end -}}

{{- define "triton-tts.gatewayContainer" -}}
{{- $g := .Values.gateway -}}
{{- $riva := include "triton-tts.rivaEnabled" . -}}
{{- if eq $g.mode "sidecar" -}}
{{- $t := .Values.triton -}}
{{- $taken := list (int $t.httpPort) (int $t.grpcPort) (int $t.metricsPort) (int $t.healthPort) -}}
{{- if has (int $g.port) $taken -}}
{{- fail (printf "gateway.port %d is taken by Triton in the same pod (triton.*Port): pick another" (int $g.port)) -}}
{{- end -}}
{{- if and $riva (has (int $g.riva.port) $taken) -}}
{{- fail (printf "gateway.riva.port %d is taken by Triton in the same pod (triton.*Port): pick another" (int $g.riva.port)) -}}
{{- end -}}
{{- end -}}
{{- if and $riva (eq (int $g.riva.port) (int $g.port)) -}}
{{- fail (printf "gateway.riva.port %d is the gateway's HTTP port (gateway.port): pick another" (int $g.riva.port)) -}}
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
    # Riva's TTS API (gRPC) on its own port; 0: none
    - --riva-port={{ if $riva }}{{ int64 $g.riva.port }}{{ else }}0{{ end }}
    {{- if and $riva $g.riva.tls.secretName }}
    - --riva-tls-cert={{ include "triton-tts.rivaTlsPath" . }}/tls.crt
    - --riva-tls-key={{ include "triton-tts.rivaTlsPath" . }}/tls.key
    {{- end }}
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
    {{- if $riva }}
    - { name: riva, containerPort: {{ int64 $g.riva.port }}, protocol: TCP }
    {{- end }}
  # /health/live: the process serves; /health/ready: Triton and its tts_stream model are
  # ready (over the gRPC URL above). They cover the Riva port too (the same process); no
  # gRPC health check is served there.
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
    {{- if and $riva $g.riva.tls.secretName }}
    - { name: riva-tls, mountPath: {{ include "triton-tts.rivaTlsPath" . }}, readOnly: true }
    {{- end }}
{{- end -}}
