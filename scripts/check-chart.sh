#!/usr/bin/env bash
# Renders the Helm chart (charts/cryo) offline and type-checks every object it produces, for the
# default values and each value set in charts/cryo/ci/; checks the plain manifests in
# deploy/manifests the same way and that they still equal the chart's render. No helm, no
# cluster: deploy/chart-render (Go text/template + Debian's sprig, Helm's glue) renders, after
# checking the merged values against charts/cryo/values.schema.json as Helm does, then
#   1. kubectl create --dry-run=client --validate=false -o json: parses every document and maps
#      its apiVersion/kind (against an offline discovery cache written below; kubectl has no
#      server here). This step alone does not type-check bodies: kubectl keeps them unstructured.
#   2. kubecheck.py objects: every field against the Kubernetes API types (python3-kubernetes),
#      required fields, references inside the release, cryod.json keys and shim flags against
#      their sources.
#   3. kubectl set image --local: decodes the workloads into kubectl's compiled-in Go types
#      (a newer API than step 2); kubecheck.py roundtrip: nothing was dropped or changed.
#   4. What each value set must render: its kinds exactly, lines it must (not) contain, and
#      what NOTES.txt tells the operator.
#   5. The alerts: the PrometheusRule's rules through `promtool check rules` and the unit tests
#      in charts/cryo/tests/ through `promtool test rules`.
#   6. Negative cases: values the schema or the templates must refuse (with the value's path
#      in the message), and broken templates and rules that the checks must catch.
# Also: every value in values.yaml is documented, charts/cryo/README.md's table is current, the
# schema is valid draft-07 and accepts no key that values.yaml does not document.
# Exit 0 only if everything passed. Needs: go (golang-go), sprig, sigs.k8s.io/yaml, semver,
# gojsonschema (Debian -dev packages), python3-kubernetes, python3-jsonschema, kubectl, and
# promtool (Debian's prometheus; without it the alert checks are skipped, saying so).
# scripts/setup.sh installs them.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CHART=$ROOT/charts/cryo
BUILD=${CHART_BUILD_DIR:-${BUILD_DIR:-$ROOT/build}/charts/chart-render}
PY=/usr/bin/python3   # Debian's, which has python3-kubernetes (not a pyenv one)
KUBECHECK=$ROOT/deploy/chart-render/kubecheck.py

say() { printf '[check-chart] %s\n' "$*"; }
fail() { printf '[check-chart] FAILED: %s\n' "$*" >&2; exit 1; }

for tool in go kubectl "$PY"; do
  command -v "$tool" >/dev/null || fail "$tool not found (run scripts/setup.sh)"
done
"$PY" -c 'import kubernetes' 2>/dev/null || fail "python3-kubernetes missing (run scripts/setup.sh)"
"$PY" -c 'import jsonschema, yaml' 2>/dev/null || fail "python3-jsonschema or python3-yaml missing (run scripts/setup.sh)"

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$BUILD"

# --- build the renderer (GOPATH mode: Debian's Go libraries under /usr/share/gocode) ---------
export GO111MODULE=off GOPATH=/usr/share/gocode GOCACHE=$BUILD/gocache GOFLAGS='' GOTOOLCHAIN=local
RENDER=$BUILD/chart-render
(cd "$ROOT/deploy/chart-render" && go build -o "$RENDER" . && go vet . && go test -count=1 . >"$TMP/gotest.log" 2>&1) ||
  { cat "$TMP/gotest.log" 2>/dev/null; fail "building or testing deploy/chart-render"; }
say "renderer built and its unit tests pass: $(tail -1 "$TMP/gotest.log")"

# --- offline discovery for kubectl -------------------------------------------------------------
# kubectl maps kinds through API discovery even for client-side dry runs. It reads discovery
# from its cache when the cache is fresh, so a cache for a server that does not exist lets it
# run offline. It lists the kinds the chart may produce, with their real scopes.
# An empty kubeconfig: nothing of the user's (contexts, credential plugins) is involved.
: >"$TMP/kubeconfig"
KUBE=(kubectl --kubeconfig="$TMP/kubeconfig" --server=http://127.0.0.1:1 --cache-dir="$TMP/kcache" --request-timeout=5s)
disc=$TMP/kcache/discovery/127.0.0.1_1
mkdir -p "$disc"
"$PY" - "$disc" <<'PY'
import json, os, sys
d = sys.argv[1]
groups = {
    "v1": [("namespaces", "Namespace", False), ("configmaps", "ConfigMap", True),
           ("serviceaccounts", "ServiceAccount", True), ("services", "Service", True),
           ("persistentvolumeclaims", "PersistentVolumeClaim", True),
           ("resourcequotas", "ResourceQuota", True), ("secrets", "Secret", True)],
    "apps/v1": [("daemonsets", "DaemonSet", True)],
    "batch/v1": [("jobs", "Job", True)],
    "rbac.authorization.k8s.io/v1": [("roles", "Role", True), ("rolebindings", "RoleBinding", True),
                                     ("clusterroles", "ClusterRole", False),
                                     ("clusterrolebindings", "ClusterRoleBinding", False)],
    "networking.k8s.io/v1": [("networkpolicies", "NetworkPolicy", True)],
    "monitoring.coreos.com/v1": [("servicemonitors", "ServiceMonitor", True),
                                 ("prometheusrules", "PrometheusRule", True)],
}
glist = []
for gv, res in groups.items():
    group, _, version = gv.rpartition("/")
    ver = {"groupVersion": gv, "version": version}
    glist.append({"name": group, "versions": [ver], "preferredVersion": ver})
    os.makedirs(os.path.join(d, gv), exist_ok=True)
    with open(os.path.join(d, gv, "serverresources.json"), "w") as f:
        json.dump({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv,
                   "resources": [{"name": n, "singularName": k.lower(), "namespaced": ns,
                                  "kind": k, "verbs": ["create", "get", "list"]}
                                 for n, k, ns in res]}, f)
with open(os.path.join(d, "servergroups.json"), "w") as f:
    json.dump({"kind": "APIGroupList", "apiVersion": "v1", "groups": glist}, f)
PY

# "ConfigMap×1, DaemonSet×1, ...": the kinds of a rendered file, sorted, with their counts.
kinds_of() {
  grep -E '^kind: ' "$1" | awk '{print $2}' | sort | uniq -c | awk '{printf "%s%s×%s", sep, $2, $1; sep=", "}'
}

# check NAME FILE [kubectl-types]: steps 1-3 on one rendered file. With kubectl-types, step 2 is
# left out: Debian's python3-kubernetes predates fields the examples use (a Job's
# podFailurePolicy), which kubectl's compiled-in types (step 3) know.
checked=0
check() {
  local name=$1 file=$2 out=$TMP/$1
  local kinds
  kinds=$(kinds_of "$file")
  "${KUBE[@]}" create --dry-run=client --validate=false -o json -f "$file" >"$out.json" 2>"$out.kubectl.err" ||
    { cat "$out.kubectl.err" >&2; fail "$name: kubectl could not decode the objects"; }
  : >"$out.check"
  if [ "${3:-}" != kubectl-types ]; then
    "$PY" "$KUBECHECK" objects "$out.json" --repo "$ROOT" >"$out.check" 2>&1 ||
      { cat "$out.check" >&2; fail "$name: type check"; }
  fi
  grep 'warning' "$out.check" | sed "s/^/[check-chart]   $name: /" || true
  # Workloads through kubectl's typed decoder; what comes back must hold every field that went in.
  "$PY" - "$out.json" "$out.workloads.json" <<'PY'
import json, sys
sys.path.insert(0, "")
text, dec, i, objs = open(sys.argv[1]).read(), json.JSONDecoder(), 0, []
while True:
    while i < len(text) and text[i].isspace(): i += 1
    if i >= len(text): break
    o, i = dec.raw_decode(text, i); objs.append(o)
with open(sys.argv[2], "w") as f:
    for o in objs:
        if o["kind"] in ("DaemonSet", "Deployment", "Job", "Pod"):
            f.write(json.dumps(o) + "\n")
PY
  if [ -s "$out.workloads.json" ]; then
    # kubectl prints nothing for an object it did not change, so every image becomes a sentinel
    # that the comparison then accepts in image fields only.
    local sentinel=kubecheck.invalid/sentinel:0
    "${KUBE[@]}" set image --local -o json -f "$out.workloads.json" "*=$sentinel" >"$out.typed.json" 2>"$out.typed.err" ||
      { cat "$out.typed.err" >&2; fail "$name: kubectl's typed decode refused a workload"; }
    "$PY" "$KUBECHECK" roundtrip "$out.workloads.json" "$out.typed.json" "$sentinel" >>"$out.check" 2>&1 ||
      { cat "$out.check" >&2; fail "$name: typed round trip changed a workload"; }
  fi
  checked=$((checked + 1))
  say "ok  $name: $kinds"
}

# --- what each value set must render (step 4) --------------------------------------------------
# expect_kinds NAME "Kind×N, ...": exactly these kinds. expect_has/expect_lacks NAME ERE WHY.
expect_kinds() {
  local got
  got=$(kinds_of "$TMP/$1.yaml")
  [ "$got" = "$2" ] || fail "$1: renders $got; expected $2"
}
expect_has() { grep -qE -- "$2" "$TMP/$1.yaml" || fail "$1: $3 (no line matches /$2/)"; }
expect_lacks() { ! grep -qE -- "$2" "$TMP/$1.yaml" || fail "$1: $3 (a line matches /$2/)"; }
# expect_peer_tls NAME: the peer certificate the chart made is one cryod can use both ways: signed
# by the Secret's CA, for the name cryod checks (cryo-peer), as server and as client.
expect_peer_tls() {
  local d=$TMP/$1-peer-tls
  mkdir -p "$d"
  "$PY" - "$TMP/$1.yaml" "$d" <<'PY' || fail "$1: the peer TLS Secret does not decode"
import base64, sys, yaml
for doc in yaml.safe_load_all(open(sys.argv[1])):
    if doc and doc.get("kind") == "Secret" and doc.get("type") == "kubernetes.io/tls":
        for k in ("ca.crt", "tls.crt", "tls.key"):
            open(f"{sys.argv[2]}/{k}", "wb").write(base64.b64decode(doc["data"][k]))
        sys.exit(0)
sys.exit(1)
PY
  openssl verify -CAfile "$d/ca.crt" "$d/tls.crt" >/dev/null 2>&1 ||
    fail "$1: the peer certificate is not signed by the Secret's CA"
  local text
  text=$(openssl x509 -in "$d/tls.crt" -noout -text)
  grep -q 'DNS:cryo-peer' <<<"$text" || fail "$1: the peer certificate does not name cryo-peer"
  grep -q 'TLS Web Client Authentication' <<<"$text" && grep -q 'TLS Web Server Authentication' <<<"$text" ||
    fail "$1: the peer certificate is not for both server and client"
  [ "$(openssl x509 -in "$d/tls.crt" -noout -pubkey | sha256sum)" = "$(openssl pkey -in "$d/tls.key" -pubout | sha256sum)" ] ||
    fail "$1: tls.key is not tls.crt's key"
}
# expect_notes NAME FIXED-STRING WHY: the rendered NOTES.txt says it.
expect_notes() { grep -qF -- "$2" "$TMP/$1.notes" || fail "$1: NOTES.txt: $3 (no line has '$2')"; }
# expect_pod NAME PYTHON-EXPR JSON WHY: the expression, over the DaemonSet's pod spec `p`, its
# cryod container `c` and its install-shim init container `i` (None without one), equals JSON.
expect_pod() {
  local got
  got=$("$PY" - "$TMP/$1.yaml" "$2" <<'PY'
import json, sys, yaml
ds = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "DaemonSet"][0]
p = ds["spec"]["template"]["spec"]
c = [x for x in p["containers"] if x["name"] == "cryod"][0]
i = ([x for x in p.get("initContainers", []) if x["name"] == "install-shim"] or [None])[0]
print(json.dumps(eval(sys.argv[2]), sort_keys=True))
PY
  ) || fail "$1: evaluating $2"
  [ "$got" = "$("$PY" -c 'import json,sys; print(json.dumps(json.loads(sys.argv[1]), sort_keys=True))' "$3")" ] ||
    fail "$1: $4: $2 is $got, expected $3"
}
# Probe as "ACTION PATH-OR-COMMAND period timeout failures" for a compact comparison.
probe() { echo "[c['$1'].get('httpGet', c['$1'].get('exec')), c['$1'].get('initialDelaySeconds'), c['$1']['periodSeconds'], c['$1']['timeoutSeconds'], c['$1']['failureThreshold']]"; }

# expectations NAME: the checks of the defaults or of ci/NAME-values.yaml; fails for a value set
# that has none, so a new file in ci/ comes with its own.
expectations() {
  local n=$1
  case $n in
    default)
      expect_kinds "$n" "ClusterRole×1, ConfigMap×1, DaemonSet×1, Role×1, Secret×1, Service×1, ServiceAccount×1"
      expect_has "$n" '^ +privileged: true$' "cryod is privileged by default"
      expect_has "$n" '^ +kubernetes.io/os: linux$' "the default nodeSelector (Linux)"
      expect_has "$n" '^ +kubernetes.io/arch: amd64$' "the default nodeSelector (amd64 image)"
      expect_has "$n" '"metrics_address": "0.0.0.0:9464"' "cryod's HTTP API on the pod IP"
      # ... and only to callers with the token of the Secret the chart makes and mounts.
      expect_has "$n" '"http_api_token_file": "/etc/cryo-http-api/token"' "cryod's API token file"
      expect_has "$n" '^ +secretName: cryo-http-api$' "the token's Secret mounted"
      expect_has "$n" '^ +cryo.dev/http-api-token-secret: cryo-http-api$' "the Secret named for kubectl cryo"
      expect_has "$n" '^ +resourceNames: \["cryo-http-api"\]$' "the reader Role may get that Secret alone"
      expect_has "$n" '^ +path: /var/lib/cryo/store$' "the hostPath store"
      # Probes: HTTP through cryod's HTTP loop, readiness on /healthz (503 while the store is not
      # writable), liveness on a path that answers whatever the store's state.
      expect_pod "$n" "$(probe readinessProbe)" '[{"path": "/healthz", "port": "http"}, null, 10, 5, 3]' "readiness"
      expect_pod "$n" "$(probe livenessProbe)" '[{"path": "/metrics", "port": "http"}, null, 20, 10, 6]' "liveness"
      expect_pod "$n" "$(probe startupProbe)" '[{"path": "/metrics", "port": "http"}, null, 10, 10, 60]' "startup"
      # Only GPU taints are tolerated (not the control plane's), and the pods are node-critical.
      expect_pod "$n" "p['tolerations']" '[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, {"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]' "GPU tolerations only"
      expect_pod "$n" "p['priorityClassName']" '"system-node-critical"' "priority class"
      # The unprivileged installer writes nothing under the host's /etc.
      expect_pod "$n" "i['securityContext']['privileged']" 'false' "the installer is not privileged"
      expect_lacks "$n" '^ +path: /etc(/|$)' "no host path under /etc"
      expect_pod "$n" "sorted(v['hostPath']['path'] for v in p['volumes'] if v['name'] in ('host-systemd-dir', 'host-shim-config'))" '["/opt/cryo/etc", "/opt/cryo/systemd"]' "unit and flags under the prefix"
      expect_notes "$n" "cryod                 DaemonSet cryo" "what was installed"
      expect_notes "$n" "kubectl -n cryo-system rollout status daemonset/cryo" "how to check it"
      expect_notes "$n" "ln -sf /opt/cryo/etc/cri-shim.env /etc/cryo/cri-shim.env" "linking the flags"
      expect_notes "$n" "systemctl link /opt/cryo/systemd/cryo-cri-shim.service" "linking the unit"
      expect_notes "$n" "containerRuntimeEndpoint: unix:///run/cryo/cri-shim.sock" "the kubelet step"
      expect_notes "$n" "docs/install.md" "where the docs are"
      expect_notes "$n" "a job resumes only on the node it was" "the node-local store"
      ;;
    crio)
      expect_kinds "$n" "ClusterRole×1, ClusterRoleBinding×1, ConfigMap×1, DaemonSet×1, Job×1, Namespace×1, ResourceQuota×1, Role×2, RoleBinding×3, Secret×1, Service×1, ServiceAccount×2"
      expect_has "$n" '"runtime_endpoint": "unix:///var/run/crio/crio.sock"' "CRI-O's socket for cryod"
      expect_has "$n" '--runtime-endpoint=unix:///var/run/crio/crio.sock' "CRI-O's socket for the shim"
      expect_has "$n" '^ +path: /var/lib/containers/storage$' "CRI-O's storage root"
      expect_has "$n" '--annotation-prefix=checkpoint.example.com' "the shim's annotation prefix"
      expect_has "$n" '"annotation_prefix": "checkpoint.example.com"' "cryod's annotation prefix"
      expect_has "$n" '^ +hostNetwork: true$' "host networking"
      expect_has "$n" 'image: registry.example.com/cryo/cryo-node@sha256:0{64}$' "the image by digest"
      expect_has "$n" '"termination_providers": "gce,aws"' "termination notices"
      expect_has "$n" '^ +name: oncall@example.com$' "the checkpointers' bindings"
      # shim.manageService: the installer is privileged and the only one writing the host's /etc.
      expect_pod "$n" "i['securityContext']" '{"privileged": true, "runAsUser": 0}' "the privileged installer"
      expect_pod "$n" "sorted(v['hostPath']['path'] for v in p['volumes'] if v['name'] in ('host-systemd-dir', 'host-shim-config'))" '["/etc/cryo", "/etc/systemd/system"]' "unit and flags in /etc"
      expect_pod "$n" "p['tolerations']" '[{"key": "cloud.google.com/gke-spot", "operator": "Exists", "effect": "NoSchedule"}]' "the tolerations set"
      expect_notes "$n" "Nothing: the installer enabled and started cryo-cri-shim.service" "no manual unit step"
      expect_notes "$n" "Nothing: the installer points kubelet at the shim" "no manual kubelet step (shim.configureKubelet)"
      # shim.configureKubelet: a privileged init container after the installer converts the node.
      expect_pod "$n" "[x['name'] for x in p['initContainers']]" '["install-shim", "configure-kubelet"]' "the kubelet step after the install"
      expect_pod "$n" "[x['command'] for x in p['initContainers'] if x['name'] == 'configure-kubelet'][0]" '["/opt/cryo/host/kubelet-endpoint.sh", "$(KUBELET_ENDPOINT_MODE)"]' "the mode from the pod"
      expect_pod "$n" "[e['valueFrom']['fieldRef']['fieldPath'] for x in p['initContainers'] if x['name'] == 'configure-kubelet' for e in x['env'] if e['name'] == 'KUBELET_ENDPOINT_MODE'][0]" '"metadata.annotations['"'"'cryo.dev/kubelet-endpoint'"'"']"' "the mode from the pod's annotation"
      expect_pod "$n" "ds['spec']['template']['metadata']['annotations']['cryo.dev/kubelet-endpoint']" '"convert"' "convert on every pod start"
      # helm uninstall: a pre-delete hook flips every node's pod to restore and waits for them.
      expect_has "$n" '^ +helm.sh/hook: pre-delete$' "the uninstall hook"
      expect_has "$n" '^ +- /usr/local/bin/cryo-uninstall$' "cryo-uninstall in the hook"
      expect_has "$n" '^ +- --daemonset=cryo$' "the hook names the DaemonSet"
      expect_has "$n" '^ +- --timeout=240s$' "the hook's timeout"
      expect_has "$n" '^ +verbs: \[get, patch\]$' "the hook may patch the DaemonSet"
      expect_pod "$n" "[x['securityContext'] for x in p['initContainers'] if x['name'] == 'configure-kubelet'][0]" '{"privileged": true, "runAsUser": 0}' "privileged, as the installer is"
      expect_pod "$n" "sorted(v['hostPath']['path'] for v in p['volumes'] if v['name'] in ('host-kubelet-config', 'host-shim-socket'))" '["/run/cryo", "/var/lib/kubelet"]' "kubelet's config and the shim's socket"
      ;;
    gpu)
      expect_kinds "$n" "ClusterRole×1, ConfigMap×1, DaemonSet×1, Role×1, Secret×1, Service×1, ServiceAccount×1"
      expect_has "$n" '^ +runtimeClassName: nvidia$' "the NVIDIA runtime class"
      expect_has "$n" '^ +- name: NVIDIA_VISIBLE_DEVICES$' "the driver injected"
      expect_has "$n" '"gpu_thp_during_checkpoint": "always"' "THP during checkpoints"
      expect_has "$n" '^ +path: /sys/kernel/mm/transparent_hugepage$' "the THP mount"
      expect_has "$n" '"gpu_lock_timeout_ms": 30000' "the lock timeout"
      expect_has "$n" '"gpu_staging_mib": 163840' "the staging memory"
      expect_has "$n" '"gpu_staging_slots": 2' "its slots"
      expect_has "$n" '^ +nvidia.com/gpu.present: "true"$' "the GPU nodeSelector"
      expect_has "$n" '^ +kubernetes.io/arch: amd64$' "merged with the default nodeSelector"
      ;;
    hostpath-shared)
      expect_kinds "$n" "ClusterRole×1, ConfigMap×1, DaemonSet×1, Role×1, Secret×1, Service×1, ServiceAccount×1"
      expect_has "$n" '^ +path: /mnt/cryo/checkpoints$' "the shared hostPath store"
      expect_has "$n" '^ +mountPropagation: HostToContainer$' "a late NFS mount still shows up"
      expect_has "$n" '"retention_keep": 5' "retention"
      ;;
    least-privilege)
      expect_kinds "$n" "ConfigMap×1, DaemonSet×1, ServiceAccount×1"
      expect_lacks "$n" 'privileged: true' "nothing is privileged"
      expect_has "$n" '^ +- CHECKPOINT_RESTORE$' "the explicit capabilities"
      expect_has "$n" '^ +type: Unconfined$' "seccomp unconfined"
      expect_has "$n" 'container.apparmor.security.beta.kubernetes.io/cryod: unconfined' "AppArmor unconfined"
      expect_has "$n" '^ +path: /sys/fs/cgroup$' "the cgroup tree"
      expect_lacks "$n" '^ +path: /dev$' "no host /dev without privileged"
      expect_has "$n" '"metrics_address": "127.0.0.1:9464"' "cryod's HTTP on loopback only"
      expect_lacks "$n" 'containerPort:' "no port"
      expect_has "$n" 'command: \["/usr/local/bin/cryo","--socket=/run/cryo/cryod.sock","node"\]' "exec probes without the HTTP port"
      expect_lacks "$n" 'httpGet:|tcpSocket:' "no probe on the closed port"
      local node='{"command": ["/usr/local/bin/cryo", "--socket=/run/cryo/cryod.sock", "node"]}'
      expect_pod "$n" "$(probe readinessProbe)" "[$node, null, 10, 5, 3]" "readiness over the socket"
      expect_pod "$n" "$(probe livenessProbe)" "[$node, null, 20, 10, 6]" "liveness over the socket"
      expect_pod "$n" "$(probe startupProbe)" "[$node, null, 10, 10, 60]" "startup over the socket"
      expect_notes "$n" "metrics.enabled is false" "the closed HTTP port"
      ;;
    monitoring)
      expect_kinds "$n" "ClusterRole×1, ConfigMap×1, DaemonSet×1, NetworkPolicy×1, PrometheusRule×1, Role×1, Secret×1, Service×1, ServiceAccount×1, ServiceMonitor×1"
      [ "$(grep -cE '^ +release: kube-prometheus-stack$' "$TMP/$n.yaml")" = 2 ] ||
        fail "$n: the ServiceMonitor's and the PrometheusRule's selector label"
      expect_has "$n" '^ +interval: 15s$' "the scrape interval"
      expect_has "$n" '^ +cidr: 10.0.0.0/28$' "the API server's addresses in the NetworkPolicy"
      expect_has "$n" '^ +kubernetes.io/metadata.name: monitoring$' "Prometheus' namespace in the NetworkPolicy"
      expect_has "$n" '^ +team: ml-platform$' "ruleLabels on the alerts"
      expect_notes "$n" "PrometheusRule cryo" "the PrometheusRule"
      expect_notes "$n" "cryod serves at /metrics/shim (metrics.shim.enabled) and the ServiceMonitor scrapes" "the shim's metrics scraped through cryod"
      expect_has "$n" '^ +path: /metrics/shim$' "the ServiceMonitor's endpoint for the shim's metrics"
      expect_has "$n" '"shim_metrics_file": "/run/cryo/cri-shim.prom"' "cryod serving the shim's file"
      expect_has "$n" '--metrics-file=/run/cryo/cri-shim.prom' "the shim writing its file"
      ;;
    jobs)
      expect_kinds "$n" "ClusterRole×2, ClusterRoleBinding×1, ConfigMap×1, DaemonSet×1, NetworkPolicy×1, Role×1, Secret×3, Service×1, ServiceAccount×1"
      expect_has "$n" '"peer_listen": "0.0.0.0:9470"' "cryod serving the Peer service"
      expect_has "$n" '"peer_token_file": "/etc/cryo-peer/token"' "the nodes' shared token"
      expect_has "$n" '^ +automountServiceAccountToken: true$' "the API token in cryod's pod"
      expect_has "$n" '^ +- name: peer$' "the peer port"
      expect_has "$n" '^ +secretName: cryo-peer$' "the peer Secret mounted"
      expect_has "$n" '"peer_tls_dir": "/etc/cryo-peer-tls"' "mutual TLS between the cryods"
      expect_has "$n" '^ +secretName: cryo-peer-tls$' "the peer certificate mounted"
      expect_has "$n" '^type: kubernetes.io/tls$' "the peer certificate's Secret"
      expect_has "$n" '^ +tls.key: [A-Za-z0-9+/=]{100,}$' "a key made by the chart"
      expect_peer_tls "$n"
      expect_has "$n" '^ +name: cryo-jobs$' "the ClusterRole that lists pods"
      expect_has "$n" '^ +- apiGroups: \[jobset.x-k8s.io\]$' "reading a JobSet's size"
      expect_has "$n" '^ +- port: peer$' "the other cryods let through the NetworkPolicy"
      ;;
    pvc)
      expect_kinds "$n" "ClusterRole×1, ConfigMap×1, DaemonSet×1, PersistentVolumeClaim×1, Role×1, Secret×1, Service×1, ServiceAccount×1"
      expect_has "$n" '^ +claimName: cryo-store$' "the store from the created claim"
      expect_has "$n" '^ +storageClassName: "nfs-rwx"$' "the storage class"
      expect_has "$n" '^ +storage: "500Gi"$' "the size"
      expect_has "$n" '^ +- ReadWriteMany$' "a shared claim"
      expect_has "$n" 'helm.sh/resource-policy: keep' "kept on uninstall"
      expect_lacks "$n" '^ +path: /var/lib/cryo/store$' "no hostPath store"
      ;;
    *) return 1 ;;
  esac
  say "ok  expected: $n"
}

# --- the chart: defaults and each value set ----------------------------------------------------
render() { "$RENDER" --name cryo --namespace cryo-system "$@" "$CHART"; }
# render_set NAME ARGS...: $TMP/NAME.yaml and its NOTES.txt in $TMP/NAME.notes.
render_set() {
  local name=$1
  shift
  render --notes "$@" >"$TMP/$name.yaml" 2>"$TMP/$name.notes" || { cat "$TMP/$name.notes" >&2; return 1; }
}

render_set default || fail "rendering the defaults"
check default "$TMP/default.yaml"
expectations default
for values in "$CHART"/ci/*-values.yaml; do
  name=$(basename "$values" -values.yaml)
  render_set "$name" -f "$values" --api-versions monitoring.coreos.com/v1 ||
    fail "rendering with ci/$(basename "$values")"
  check "$name" "$TMP/$name.yaml"
  expectations "$name" || fail "ci/$(basename "$values") has no expectations in scripts/check-chart.sh: add them"
done
# --set on top of a file, as an operator would.
render -f "$CHART/ci/pvc-values.yaml" --set store.pvc.existingClaim=shared-ckpt \
  --set 'gpu.plugins={cuda,rocm}' --set cryod.retentionKeep=5 --set-string image.tag=1.2.3 \
  >"$TMP/set-flags.yaml" || fail "rendering with --set"
grep -q 'claimName: shared-ckpt' "$TMP/set-flags.yaml" || fail "--set store.pvc.existingClaim had no effect"
! grep -q '^kind: PersistentVolumeClaim' "$TMP/set-flags.yaml" || fail "existingClaim still created a claim"
grep -q '"retention_keep": 5' "$TMP/set-flags.yaml" || fail "--set cryod.retentionKeep had no effect"
grep -q 'image: cryo/cryo-node:1.2.3' "$TMP/set-flags.yaml" || fail "--set-string image.tag had no effect"
check set-flags "$TMP/set-flags.yaml"
# shim.manageService without shim.configureKubelet: the kubelet step puts back what an earlier
# conversion replaced (turning configureKubelet off before helm uninstall); with neither, no
# privileged kubelet step at all.
render --set shim.manageService=true >"$TMP/restore.yaml" || fail "rendering with shim.manageService"
grep -qE '^ +cryo.dev/kubelet-endpoint: restore$' "$TMP/restore.yaml" ||
  fail "shim.manageService without configureKubelet: no kubelet-endpoint.sh restore"
grep -qE '^ +- /usr/local/bin/cryo-uninstall$' "$TMP/restore.yaml" ||
  fail "shim.manageService without configureKubelet: no uninstall hook"
! grep -q 'cryo-uninstall' "$TMP/default.yaml" || fail "the defaults have an uninstall hook"
! grep -q 'kubelet-endpoint.sh' "$TMP/default.yaml" || fail "the defaults run the privileged kubelet step"
check restore "$TMP/restore.yaml"
say "ok  the kubelet step: convert with configureKubelet, restore with manageService alone, none by default"

# --- the values reference and the schema ---------------------------------------------------------
"$PY" "$ROOT/deploy/chart-render/values_doc.py" --check || fail "charts/cryo/README.md values table"
say "ok  charts/cryo/README.md documents every value of values.yaml"
# The schema is valid draft-07 (python3-jsonschema's meta-schema check: gojsonschema, which the
# renderer validates with, is lenient there), accepts the chart's own defaults by this second
# implementation too, and accepts no key of ours that values.yaml does not have (and document).
"$PY" - "$CHART" <<'PY' || fail "charts/cryo/values.schema.json"
import json, sys, yaml
import jsonschema
chart = sys.argv[1]
schema = json.load(open(f"{chart}/values.schema.json"))
jsonschema.Draft7Validator.check_schema(schema)
values = yaml.safe_load(open(f"{chart}/values.yaml"))
jsonschema.Draft7Validator(schema).validate(values)
# Objects whose keys are Kubernetes' (or listed in values.yaml's comment), not values of ours.
OPEN = {"global", "cryod.resources", "shim.resources", "updateStrategy", "termination.extraConfig"}
missing = []
def walk(node, val, path):
    while "$ref" in node:
        node = schema["definitions"][node["$ref"].rsplit("/", 1)[1]]
    if node.get("additionalProperties") is not False or "properties" not in node:
        return
    if node.get("type") == "object" and not isinstance(val, dict):
        return
    for k, sub in node["properties"].items():
        p = f"{path}.{k}" if path else k
        if p in OPEN:
            continue
        if k not in val:
            missing.append(p)
        else:
            walk(sub, val[k], p)
walk(schema, values, "")
if missing:
    sys.exit("values.schema.json accepts keys that values.yaml does not have: " + ", ".join(missing))
print("schema ok")
PY
say "ok  values.schema.json: valid draft-07, accepts the defaults, no key values.yaml lacks"

# --- the plain manifests -----------------------------------------------------------------------
manifests=$ROOT/deploy/manifests/cryo.yaml
bash "$ROOT/deploy/manifests/generate.sh" --render "$RENDER" --stdout >"$TMP/manifests.yaml" ||
  fail "rendering deploy/manifests"
diff -u "$manifests" "$TMP/manifests.yaml" >"$TMP/manifests.diff" ||
  { head -40 "$TMP/manifests.diff" >&2; fail "deploy/manifests/cryo.yaml differs from the chart's render: run deploy/manifests/generate.sh"; }
check plain-manifests "$manifests"

# --- the examples users copy ---------------------------------------------------------------------
for example in "$ROOT"/deploy/examples/*.yaml; do
  check "example-$(basename "$example" .yaml)" "$example" kubectl-types
done
# The example Job ignores exactly the exit code cryo-init stops with after a checkpoint.
code=$(sed -n 's/^#define CRYO_INIT_CHECKPOINTED_EXIT_DEFAULT \([0-9]*\).*/\1/p' \
  "$ROOT/lib/contract/cryo_init_protocol.h")
grep -q "values: \[$code\]" "$ROOT/deploy/examples/checkpointed-job.yaml" ||
  fail "deploy/examples/checkpointed-job.yaml does not ignore cryo-init's exit code $code"
grep -q "restartPolicy: Never" "$ROOT/deploy/examples/checkpointed-job.yaml" ||
  fail "deploy/examples/checkpointed-job.yaml: podFailurePolicy needs restartPolicy: Never"
say "examples: $(ls "$ROOT"/deploy/examples/*.yaml | wc -l) type-checked; the Job ignores exit code $code"

# --- the alerts: promtool checks the PrometheusRule's rules and runs charts/cryo/tests/ ---------
# rules_of RENDERED OUT: the PrometheusRule's spec (its groups), i.e. a Prometheus rules file.
rules_of() {
  "$PY" - "$1" "$2" <<'PY'
import sys, yaml
rules = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "PrometheusRule"]
if len(rules) != 1:
    sys.exit(f"{sys.argv[1]}: {len(rules)} PrometheusRules, expected 1")
yaml.safe_dump(rules[0]["spec"], open(sys.argv[2], "w"), sort_keys=False, width=1000)
PY
}
# alert_render TEST: the render whose rules charts/cryo/tests/TEST.yaml tests.
alert_render() {
  case $1 in
    alerts_test) echo monitoring ;;
    alerts_pvc_test)
      render -f "$CHART/ci/pvc-values.yaml" --set monitoring.prometheusRule.enabled=true \
        >"$TMP/pvc-alerts.yaml" || return 1
      echo pvc-alerts ;;
    *) return 1 ;;
  esac
}
PROMTOOL=${PROMTOOL:-promtool}
if command -v "$PROMTOOL" >/dev/null; then
  ntests=0
  for t in "$CHART"/tests/*_test.yaml; do
    tname=$(basename "$t" .yaml)
    src=$(alert_render "$tname") ||
      fail "charts/cryo/tests/$tname.yaml: no render for it in scripts/check-chart.sh (alert_render): add one"
    dir=$TMP/$tname
    mkdir -p "$dir"
    rules_of "$TMP/$src.yaml" "$dir/rules.yaml" || fail "$tname: extracting the rules of $src"
    "$PROMTOOL" check rules "$dir/rules.yaml" >"$dir/check.log" 2>&1 ||
      { cat "$dir/check.log" >&2; fail "promtool check rules: the rules rendered for $src"; }
    cp "$t" "$dir/"
    "$PROMTOOL" test rules "$dir/$tname.yaml" >"$dir/test.log" 2>&1 ||
      { cat "$dir/test.log" >&2; fail "promtool test rules charts/cryo/tests/$tname.yaml"; }
    ntests=$((ntests + 1))
    say "ok  alerts: promtool check rules ($src: $(grep -o '[0-9]* rules found' "$dir/check.log")), test rules $tname.yaml"
  done
  [ "$ntests" -gt 0 ] || fail "no promtool tests in charts/cryo/tests/"
  # docs/operations.md's table of alerts shows what the chart renders: each alert's expression
  # (as rendered with the defaults' names and the hostPath store), its `for` and severity.
  "$PY" - "$TMP/alerts_test/rules.yaml" "$ROOT/docs/operations.md" <<'PY' || fail "docs/operations.md's alerts differ from the chart's rules"
import re, sys, yaml
rules = {r["alert"]: r for g in yaml.safe_load(open(sys.argv[1]))["groups"] for r in g["rules"]}
rows = {}
doc = open(sys.argv[2]).read()
section = doc.split("\n### Alerts\n", 1)[1].split("\n## ", 1)[0]
for line in section.splitlines():
    cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
    if len(cells) == 5 and re.fullmatch(r"`[A-Za-z]+`", cells[0]):
        rows[cells[0].strip("`")] = cells
bad = []
if set(rows) != set(rules):
    bad.append(f"alerts in the docs {sorted(rows)} != in the chart {sorted(rules)}")
for name, r in rules.items():
    if name not in rows:
        continue
    _, expr, for_, sev, _ = rows[name]
    if f"`{r['expr']}`" not in expr:
        bad.append(f"{name}: the docs do not show the rendered expression {r['expr']}")
    if for_ != r.get("for", ""):
        bad.append(f"{name}: for {for_!r} in the docs, {r.get('for', '')!r} in the chart")
    if sev != r["labels"]["severity"]:
        bad.append(f"{name}: severity {sev!r} in the docs, {r['labels']['severity']!r} in the chart")
if bad:
    sys.exit("\n".join(bad))
PY
  say "ok  docs/operations.md lists every alert with the chart's expression, for and severity"
  # The tests must be able to fail: a rule that misses the first failed preemption checkpoint.
  mkdir -p "$TMP/mutant"
  sed 's/result=~"failed|skipped"}\[1h\]) > 0$/result=~"failed|skipped"}[1h]) > 1/' \
    "$TMP/alerts_test/rules.yaml" >"$TMP/mutant/rules.yaml"
  ! cmp -s "$TMP/alerts_test/rules.yaml" "$TMP/mutant/rules.yaml" || fail "the mutation of the rules did not apply"
  cp "$CHART/tests/alerts_test.yaml" "$TMP/mutant/"
  if "$PROMTOOL" test rules "$TMP/mutant/alerts_test.yaml" >"$TMP/mutant/test.log" 2>&1 ||
    ! grep -q 'the first failed preemption checkpoint fires' "$TMP/mutant/test.log"; then
    cat "$TMP/mutant/test.log" >&2
    fail "the alert tests did not catch a rule that misses the first failed checkpoint"
  fi
  say "ok  refused: a CryoCheckpointOnStopFailed rule that misses the first failure (promtool test fails)"
  alerts="alerts checked and tested ($ntests promtool test files)"
else
  alerts="alerts SKIPPED (no promtool)"
  say "SKIPPED: $PROMTOOL not found (Debian package prometheus, which scripts/setup.sh installs): the alert rules were neither checked nor tested"
fi

# --- negative cases: the checks must catch these -------------------------------------------------
expect_refused() {  # expect_refused WHAT FIXED-STRING COMMAND...
  local what=$1 pattern=$2
  shift 2
  if "$@" >"$TMP/neg.out" 2>&1; then fail "not refused: $what"; fi
  grep -qF -- "$pattern" "$TMP/neg.out" || { cat "$TMP/neg.out" >&2; fail "refused for another reason: $what"; }
  say "ok  refused: $what"
}
# schema_refused WHAT LINE RENDER-ARGS...: refused by values.schema.json, before any template,
# with Helm's heading and the line naming the value's path.
schema_refused() {
  local what=$1 line=$2
  shift 2
  expect_refused "$what" "$line" render "$@"
  grep -qF "values don't meet the specifications of the schema(s) in the following chart(s):" "$TMP/neg.out" ||
    { cat "$TMP/neg.out" >&2; fail "not refused by the schema: $what"; }
}
bad=$TMP/bad-values
mkdir -p "$bad"
printf 'cryod:\n  retentionKep: 3\n' >"$bad/typo.yaml"
printf 'cryod:\n  retentionKeep: five\n' >"$bad/five.yaml"
printf 'retentionKeep: 3\n' >"$bad/toplevel.yaml"
printf 'cryod:\n  retentionKeep: 2.5\n' >"$bad/fraction.yaml"
printf 'image:\n  tag: 1.10\n' >"$bad/tag.yaml"
printf 'nodeSelector:\n  gpu: true\n' >"$bad/selector.yaml"
printf 'tolerations:\n  - operater: Exists\n' >"$bad/toleration.yaml"
schema_refused "a typo'd key (cryod.retentionKep: 3, from a file)" \
  "- cryod: Additional property retentionKep is not allowed" -f "$bad/typo.yaml"
schema_refused "a key at the wrong level (retentionKeep at the top)" \
  "- (root): Additional property retentionKeep is not allowed" -f "$bad/toplevel.yaml"
schema_refused "cryod.retentionKeep: five (from a file)" \
  "- cryod.retentionKeep: Invalid type. Expected: integer, given: string" -f "$bad/five.yaml"
schema_refused "--set cryod.retentionKeep=five" \
  "- cryod.retentionKeep: Invalid type. Expected: integer, given: string" --set cryod.retentionKeep=five
schema_refused "cryod.retentionKeep=-1" \
  "- cryod.retentionKeep: Must be greater than or equal to 0" --set cryod.retentionKeep=-1
schema_refused "cryod.retentionKeep: 2.5 (from a file)" \
  "- cryod.retentionKeep: Invalid type. Expected: integer, given: number" -f "$bad/fraction.yaml"
schema_refused "metrics.port=70000" "- metrics.port: Must be less than or equal to 65535" --set metrics.port=70000
schema_refused "metrics.port=0" "- metrics.port: Must be greater than or equal to 1" --set metrics.port=0
schema_refused "a negative poll interval (termination.pollMs=-5)" \
  "- termination.pollMs: Must be greater than or equal to 1" --set termination.pollMs=-5
schema_refused "a boolean as a string (metrics.enabled=yes)" \
  "- metrics.enabled: Invalid type. Expected: boolean, given: string" --set metrics.enabled=yes
schema_refused "an unquoted image tag (tag: 1.10 is the number 1.1)" \
  "- image.tag: Invalid type. Expected: string, given: number" -f "$bad/tag.yaml"
schema_refused "a nodeSelector value that is not a string" \
  "- nodeSelector.gpu: Invalid type. Expected: string, given: boolean" -f "$bad/selector.yaml"
schema_refused "a misspelt toleration field" \
  "- tolerations.0: Additional property operater is not allowed" -f "$bad/toleration.yaml"
schema_refused "image.pullPolicy=Sometimes" \
  '- image.pullPolicy: image.pullPolicy must be one of the following: "Always", "IfNotPresent", "Never"' \
  --set image.pullPolicy=Sometimes
schema_refused "store.type=nfs" '- store.type: store.type must be one of the following: "hostPath", "pvc"' --set store.type=nfs
schema_refused "runtime.type=docker" "- runtime.type: runtime.type must be one of the following" --set runtime.type=docker
schema_refused "gpu.thpDuringCheckpoint=madvise" "- gpu.thpDuringCheckpoint: gpu.thpDuringCheckpoint must be one of the following" \
  --set gpu.thpDuringCheckpoint=madvise
schema_refused "cryod.logLevel=verbose" "- cryod.logLevel: cryod.logLevel must be one of the following" --set cryod.logLevel=verbose
schema_refused "shim.logLevel=trace" "- shim.logLevel: shim.logLevel must be one of the following" --set shim.logLevel=trace
schema_refused "termination.providers={ibm}" "- termination.providers.0: termination.providers.0 must be one of the following" \
  --set 'termination.providers={ibm}'
schema_refused "securityMode=root" "- securityMode: securityMode must be one of the following" --set securityMode=root
schema_refused "a relative path (cryod.stateDir=var/lib/cryo)" "- cryod.stateDir: Does not match pattern '^/'" \
  --set cryod.stateDir=var/lib/cryo
schema_refused "a probe without a period (cryod.probes.liveness.periodSeconds=0)" \
  "- cryod.probes.liveness.periodSeconds: Must be greater than or equal to 1" --set cryod.probes.liveness.periodSeconds=0
schema_refused "a probe setting deleted (cryod.probes.readiness.timeoutSeconds=null)" \
  "- cryod.probes.readiness: timeoutSeconds is required" --set cryod.probes.readiness.timeoutSeconds=null
schema_refused "monitoring.prometheusRule.storeFullRatio=85" \
  "- monitoring.prometheusRule.storeFullRatio: Must be less than or equal to 1" --set monitoring.prometheusRule.storeFullRatio=85
schema_refused "shim flag with a space" "- shim.extraArgs.0: Does not match pattern" \
  --set-string 'shim.extraArgs[0]=--log-level=a b'
# Helm's --skip-schema-validation: the templates still refuse what they cannot render.
expect_refused "store.type=nfs without the schema" "store.type must be hostPath or pvc" \
  render --skip-schema-validation --set store.type=nfs
expect_refused "termination.providers={ibm} without the schema" "is not one of gce, aws, azure" \
  render --skip-schema-validation --set 'termination.providers={ibm}'
expect_refused "shim flag with a space without the schema" "not allowed" \
  render --skip-schema-validation --set-string 'shim.extraArgs[0]=--log-level=a b'
# What the schema cannot express (rules across values): the templates refuse it.
expect_refused "shim.systemdDir under /etc without shim.manageService" \
  'shim.systemdDir "/etc/systemd/system" is under the host'"'"'s /etc' render --set shim.systemdDir=/etc/systemd/system
expect_refused "shim.manageService with a unit directory systemd does not read" \
  'shim.systemdDir "/opt/cryo/systemd": with shim.manageService' \
  render --set shim.manageService=true --set shim.systemdDir=/opt/cryo/systemd
expect_refused "shim.configureKubelet without shim.manageService" "shim.configureKubelet needs shim.manageService=true" \
  render --set shim.configureKubelet=true
expect_refused "shim.manageService without shim.install" "shim.manageService needs shim.install" \
  render --set shim.manageService=true --set shim.install=false
expect_refused "the PrometheusRule without cryod's metrics" "monitoring.prometheusRule.enabled needs metrics.enabled" \
  render --set monitoring.prometheusRule.enabled=true --set metrics.enabled=false
expect_refused "the ServiceMonitor without the Service" "metrics.serviceMonitor.enabled needs metrics.service.enabled" \
  render --set metrics.serviceMonitor.enabled=true --set metrics.service.enabled=false
expect_refused "a NetworkPolicy with hostNetwork" "networkPolicy.enabled has no effect with hostNetwork" \
  render --set networkPolicy.enabled=true --set hostNetwork=true
expect_refused "cryod's port = the shim's port on the host network" "is also the port of shim.metricsAddress" \
  render --set hostNetwork=true --set metrics.port=9466
expect_refused "a pod grace period shorter than cryod's shutdown grace" "is shorter than cryod.shutdownGraceS" \
  render --set terminationGracePeriodSeconds=60 --set cryod.shutdownGraceS=120
render --set cryod.extraConfig.store_fsnyc=false >"$TMP/badkey.yaml"
expect_refused "a cryod key cryod does not have (store_fsnyc)" "cryod has no key" bash -c \
  "'${KUBE[0]}' ${KUBE[*]:1} create --dry-run=client --validate=false -o json -f '$TMP/badkey.yaml' >'$TMP/badkey.json' && '$PY' '$KUBECHECK' objects '$TMP/badkey.json' --repo '$ROOT'"
expect_refused "a too old Kubernetes" "incompatible with Kubernetes" render --kube-version v1.24.0

broken=$TMP/broken
cp -r "$CHART" "$broken"
sed -i 's/hostPID: true/hostPid: true/' "$broken/templates/daemonset.yaml"
"$RENDER" "$broken" >"$TMP/typo.yaml"
expect_refused "a misspelt field (hostPid)" "unknown field" bash -c \
  "'${KUBE[0]}' ${KUBE[*]:1} create --dry-run=client --validate=false -o json -f '$TMP/typo.yaml' >'$TMP/typo.json' && '$PY' '$KUBECHECK' objects '$TMP/typo.json' --repo '$ROOT'"
cp "$CHART/templates/daemonset.yaml" "$broken/templates/daemonset.yaml"
sed -i 's/containerPort: {{ int .Values.metrics.port }}/containerPort: "{{ .Values.metrics.port }}"/' "$broken/templates/daemonset.yaml"
"$RENDER" "$broken" >"$TMP/port.yaml"
expect_refused "a string container port" "expected an integer" bash -c \
  "'${KUBE[0]}' ${KUBE[*]:1} create --dry-run=client --validate=false -o json -f '$TMP/port.yaml' >'$TMP/port.json' && '$PY' '$KUBECHECK' objects '$TMP/port.json' --repo '$ROOT'"
expect_refused "a string container port (kubectl typed decode)" "unable to decode" \
  "${KUBE[@]}" set image --local -o json -f "$TMP/port.json" '*=x'
cp "$CHART/templates/daemonset.yaml" "$broken/templates/daemonset.yaml"
sed -i '0,/- name: runtime-socket$/s//- name: runtime-sockets/' "$broken/templates/daemonset.yaml"
"$RENDER" "$broken" >"$TMP/mount.yaml"
expect_refused "a mount without a volume" "has no volume" bash -c \
  "'${KUBE[0]}' ${KUBE[*]:1} create --dry-run=client --validate=false -o json -f '$TMP/mount.yaml' >'$TMP/mount.json' && '$PY' '$KUBECHECK' objects '$TMP/mount.json' --repo '$ROOT'"
cp "$CHART/templates/daemonset.yaml" "$broken/templates/daemonset.yaml"
# The unprivileged installer's flags sent to the host's /etc/cryo, as chart 0.1.0 did.
sed -i 's|{{- printf "%s/etc" (trimSuffix "/" .Values.shim.prefix) -}}|/etc/cryo|' "$broken/templates/_helpers.tpl"
"$RENDER" "$broken" >"$TMP/etc.yaml"
grep -q 'path: /etc/cryo$' "$TMP/etc.yaml" || fail "the /etc mutation of _helpers.tpl did not apply"
expect_refused "an unprivileged container writing the host's /etc" "writable without being privileged" bash -c \
  "'${KUBE[0]}' ${KUBE[*]:1} create --dry-run=client --validate=false -o json -f '$TMP/etc.yaml' >'$TMP/etc.json' && '$PY' '$KUBECHECK' objects '$TMP/etc.json' --repo '$ROOT'"

say "all checks passed: $checked renders type-checked, plain manifests in sync, $alerts, negative cases refused"
