{{/* Names. Resource names are DNS labels: at most 63 characters. */}}
{{- define "cryo.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "cryo.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "cryo.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "cryo.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "cryo.selectorLabels" -}}
app.kubernetes.io/name: {{ include "cryo.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "cryo.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "cryo.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Values.managedByLabel | default .Release.Service }}
app.kubernetes.io/part-of: cryo
{{- end -}}

{{- define "cryo.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion | toString) -}}
{{- end -}}
{{- end -}}

{{/* Runtime endpoint and storage roots, defaulted from runtime.type. */}}
{{- define "cryo.runtimeType" -}}
{{- $t := .Values.runtime.type -}}
{{- if not (has $t (list "containerd" "crio")) -}}
{{- fail (printf "runtime.type must be containerd or crio, not %q" $t) -}}
{{- end -}}
{{- $t -}}
{{- end -}}

{{- define "cryo.runtimeEndpoint" -}}
{{- $t := include "cryo.runtimeType" . -}}
{{- $e := .Values.runtime.endpoint | default (ternary "unix:///run/containerd/containerd.sock" "unix:///var/run/crio/crio.sock" (eq $t "containerd")) -}}
{{- if not (hasPrefix "unix:///" $e) -}}
{{- fail (printf "runtime.endpoint must be unix:///absolute/path, not %q" $e) -}}
{{- end -}}
{{- $e -}}
{{- end -}}

{{/* Host directory holding the runtime's socket. The directory is mounted, not the socket: a
     runtime restart makes a new socket inode that a file bind mount would not follow. */}}
{{- define "cryo.runtimeSocketDir" -}}
{{- include "cryo.runtimeEndpoint" . | trimPrefix "unix://" | dir -}}
{{- end -}}

{{- define "cryo.runtimeRootDirs" -}}
{{- $t := include "cryo.runtimeType" . -}}
{{- $d := .Values.runtime.rootDirs | default (ternary (list "/var/lib/containerd") (list "/var/lib/containers/storage") (eq $t "containerd")) -}}
{{- toJson $d -}}
{{- end -}}

{{- define "cryo.storeType" -}}
{{- $t := .Values.store.type -}}
{{- if not (has $t (list "hostPath" "pvc")) -}}
{{- fail (printf "store.type must be hostPath or pvc, not %q" $t) -}}
{{- end -}}
{{- $t -}}
{{- end -}}

{{- define "cryo.storeClaimName" -}}
{{- .Values.store.pvc.existingClaim | default (printf "%s-store" (include "cryo.fullname" .)) -}}
{{- end -}}

{{- define "cryo.privileged" -}}
{{- $m := .Values.securityMode -}}
{{- if not (has $m (list "privileged" "capabilities")) -}}
{{- fail (printf "securityMode must be privileged or capabilities, not %q" $m) -}}
{{- end -}}
{{- ternary "true" "" (eq $m "privileged") -}}
{{- end -}}

{{/* cryod's configuration file (/etc/cryo/cryod.json). Keys cryod may not know yet (the
     termination notice keys, runtime_endpoint, annotation_prefix on older builds) are written
     only when they matter, because cryod refuses unknown keys. */}}
{{- define "cryo.cryodConfig" -}}
{{- $v := .Values -}}
{{- $addr := ternary (printf "0.0.0.0:%d" (int $v.metrics.port)) (printf "127.0.0.1:%d" (int $v.metrics.port)) (and $v.metrics.enabled true) -}}
{{- $c := dict
  "socket" (printf "%s/cryod.sock" $v.cryod.socketDir)
  "state_dir" $v.cryod.stateDir
  "journal_dir" $v.cryod.journalDir
  "store" $v.store.mountPath
  "metrics_address" $addr
  "log_level" $v.cryod.logLevel
  "retention_keep" (int $v.cryod.retentionKeep)
  "periodic_every_s" (int ($v.cryod.periodicEverySeconds | default 0))
  "pid_wait_timeout_ms" (int $v.cryod.pidWaitTimeoutMs)
  "gpu_lock_timeout_ms" (int $v.gpu.lockTimeoutMs)
  "incomplete_ttl_s" (int $v.cryod.incompleteTtlS)
  "store_fsync" (and $v.cryod.storeFsync true)
  "shutdown_grace_s" (int $v.cryod.shutdownGraceS)
  "allowed_uids" (list)
  "gpu_plugin_dir" $v.gpu.pluginDir
  "gpu_plugins" ($v.gpu.plugins | default list)
  "gpu_thp_during_checkpoint" $v.gpu.thpDuringCheckpoint
  "runtime_endpoint" (include "cryo.runtimeEndpoint" .)
-}}
{{- range $v.cryod.allowedUids -}}
{{- $_ := set $c "allowed_uids" (append $c.allowed_uids (int .)) -}}
{{- end -}}
{{- if gt (int ($v.gpu.stagingMiB | default 0)) 0 -}}
{{- $_ := set $c "gpu_staging_mib" (int $v.gpu.stagingMiB) -}}
{{- $_ := set $c "gpu_staging_slots" (int ($v.gpu.stagingSlots | default 0)) -}}
{{- end -}}
{{- if ne $v.annotationPrefix "cryo.dev" -}}
{{- $_ := set $c "annotation_prefix" $v.annotationPrefix -}}
{{- end -}}
{{- if and $v.metrics.enabled $v.metrics.shim.enabled -}}
{{- $_ := set $c "shim_metrics_file" (include "cryo.shimMetricsFile" .) -}}
{{- end -}}
{{- if $v.metrics.enabled -}}
{{- $_ := set $c "http_api_token_file" "/etc/cryo-http-api/token" -}}
{{- end -}}
{{- if $v.jobs.enabled -}}
{{- $_ := set $c "peer_listen" (printf "0.0.0.0:%d" (int $v.jobs.peerPort)) -}}
{{- $_ := set $c "peer_token_file" "/etc/cryo-peer/token" -}}
{{- $_ := set $c "peer_tls_dir" "/etc/cryo-peer-tls" -}}
{{- end -}}
{{- with $v.termination.providers -}}
{{- range . -}}
{{- if not (has . (list "gce" "aws" "azure")) -}}
{{- fail (printf "termination.providers: %q is not one of gce, aws, azure" .) -}}
{{- end -}}
{{- end -}}
{{- $_ := set $c "termination_providers" (join "," .) -}}
{{- $_ := set $c "termination_poll_ms" (int $v.termination.pollMs) -}}
{{- $c = mergeOverwrite $c (deepCopy ($v.termination.extraConfig | default dict)) -}}
{{- end -}}
{{- if not (has (lower (toString $v.cryod.logLevel)) (list "debug" "info" "warn" "warning" "error")) -}}
{{- fail (printf "cryod.logLevel must be debug, info, warning or error, not %q" (toString $v.cryod.logLevel)) -}}
{{- end -}}
{{- if not (has $v.gpu.thpDuringCheckpoint (list "" "always")) -}}
{{- fail (printf "gpu.thpDuringCheckpoint must be \"\" or \"always\", not %q" $v.gpu.thpDuringCheckpoint) -}}
{{- end -}}
{{- $c = mergeOverwrite $c (deepCopy ($v.cryod.extraConfig | default dict)) -}}
{{- toPrettyJson $c -}}
{{- end -}}

{{/* Flags of the shim, as the CRYO_SHIM_ARGS line of /etc/cryo/cri-shim.env. --annotation-prefix
     and --init-path are passed only when they differ from the shim's defaults, so the default
     install also works with shims that predate those flags. */}}
{{- define "cryo.shimArgs" -}}
{{- $v := .Values -}}
{{- $a := list
  (printf "--listen=%s" $v.shim.listen)
  (printf "--runtime-endpoint=%s" (include "cryo.runtimeEndpoint" .))
  (printf "--cryod-socket=%s/cryod.sock" $v.cryod.socketDir)
  (printf "--metrics-address=%s" $v.shim.metricsAddress)
  (printf "--log-level=%s" $v.shim.logLevel)
-}}
{{- if not (has (lower (toString $v.shim.logLevel)) (list "debug" "info" "warn" "warning" "error")) -}}
{{- fail (printf "shim.logLevel must be debug, info, warn or error, not %q" (toString $v.shim.logLevel)) -}}
{{- end -}}
{{- if ne $v.annotationPrefix "cryo.dev" -}}
{{- $a = append $a (printf "--annotation-prefix=%s" $v.annotationPrefix) -}}
{{- end -}}
{{- if and $v.metrics.enabled $v.metrics.shim.enabled -}}
{{- $a = append $a (printf "--metrics-file=%s" (include "cryo.shimMetricsFile" .)) -}}
{{- end -}}
{{- if ne $v.shim.initPath "/usr/local/lib/cryo/cryo-init" -}}
{{- $a = append $a (printf "--init-path=%s" $v.shim.initPath) -}}
{{- /* The installer puts the GPU fast-path library beside cryo-init. */ -}}
{{- $a = append $a (printf "--fastpath-library=%s/libcryo_gpu_fastpath.so" (dir $v.shim.initPath)) -}}
{{- end -}}
{{- range $v.shim.extraArgs -}}
{{- $a = append $a . -}}
{{- end -}}
{{- range $a -}}
{{- if regexMatch "[\\s\"'\\\\$`]" . -}}
{{- fail (printf "shim flag %q: quotes, spaces, backslashes, $ and backticks are not allowed (systemd splits the line on spaces)" .) -}}
{{- end -}}
{{- end -}}
{{- join " " $a -}}
{{- end -}}

{{/* Where the installer puts the shim's unit and flags on the host. Only the privileged
     installer (shim.manageService) writes under the host's /etc; the unprivileged one writes
     both under the shim's prefix, and the operator links them in (docs/install.md, step 3). */}}
{{- define "cryo.shimSystemdDir" -}}
{{- $v := .Values.shim -}}
{{- $d := $v.systemdDir | default (ternary "/etc/systemd/system" (printf "%s/systemd" (trimSuffix "/" $v.prefix)) (and $v.manageService true)) | trimSuffix "/" -}}
{{- if $v.manageService -}}
{{- if not (has $d (list "/etc/systemd/system" "/run/systemd/system" "/usr/local/lib/systemd/system")) -}}
{{- fail (printf "shim.systemdDir %q: with shim.manageService the unit must go to a directory systemd loads units from (/etc/systemd/system, /run/systemd/system or /usr/local/lib/systemd/system)" $d) -}}
{{- end -}}
{{- else if or (eq $d "/etc") (hasPrefix "/etc/" $d) -}}
{{- fail (printf "shim.systemdDir %q is under the host's /etc, which only the privileged installer writes: set shim.manageService=true, or leave shim.systemdDir empty (<prefix>/systemd) and link the unit in (docs/install.md, step 3)" $d) -}}
{{- end -}}
{{- $d -}}
{{- end -}}

{{/* Host directory of cri-shim.env: /etc/cryo (what the unit reads) for the privileged
     installer, <prefix>/etc for the unprivileged one (/etc/cryo/cri-shim.env is then a link the
     operator makes). */}}
{{- define "cryo.shimConfigDir" -}}
{{- if .Values.shim.manageService -}}
/etc/cryo
{{- else -}}
{{- printf "%s/etc" (trimSuffix "/" .Values.shim.prefix) -}}
{{- end -}}
{{- end -}}

{{/* For NOTES.txt: a map as "k=v, k=v" (sorted), tolerations as "key:effect, ...". */}}
{{- define "cryo.kv" -}}
{{- $out := list -}}
{{- range $k, $v := . -}}
{{- $out = append $out (printf "%s=%v" $k $v) -}}
{{- end -}}
{{- join ", " $out -}}
{{- end -}}

{{- define "cryo.taints" -}}
{{- $out := list -}}
{{- range . -}}
{{- if .key -}}
{{- $out = append $out (printf "%s%s" .key (ternary (printf ":%s" (.effect | default "")) "" (not (empty .effect)))) -}}
{{- else -}}
{{- $out = append $out (printf "every taint%s" (ternary (printf " with effect %s" (.effect | default "")) "" (not (empty .effect)))) -}}
{{- end -}}
{{- end -}}
{{- join ", " $out -}}
{{- end -}}

{{/* Where the shim writes its metrics for cryod's /metrics/shim: the socket directory, which
     the host (the shim) and cryod's pod share. */}}
{{- define "cryo.shimMetricsFile" -}}
{{- printf "%s/cri-shim.prom" .Values.cryod.socketDir -}}
{{- end -}}

{{/* The Secret with the token of cryod's HTTP checkpoint API (metrics.apiToken). */}}
{{- define "cryo.peerTlsSecret" -}}
{{- .Values.jobs.tls.existingSecret | default (printf "%s-peer-tls" (include "cryo.fullname" .)) -}}
{{- end -}}

{{- define "cryo.peerTokenSecret" -}}
{{- .Values.jobs.token.existingSecret | default (printf "%s-peer" (include "cryo.fullname" .)) -}}
{{- end -}}

{{- define "cryo.apiTokenSecret" -}}
{{- .Values.metrics.apiToken.existingSecret | default (printf "%s-http-api" (include "cryo.fullname" .)) -}}
{{- end -}}
