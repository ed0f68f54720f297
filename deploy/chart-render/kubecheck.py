#!/usr/bin/python3
"""Type-checks rendered Kubernetes objects offline. Used by scripts/check-chart.sh.

  kubecheck.py objects FILE.json [--repo ROOT]   check objects (kubectl's JSON output)
  kubecheck.py roundtrip IN.json OUT.json [SENTINEL]
                                                 every field of IN survives in OUT (images
                                                 may have become SENTINEL)

`objects` walks each built-in object against the Kubernetes API types generated from the
OpenAPI spec, as shipped by Debian's python3-kubernetes (client 22.6: the Kubernetes 1.22 API):
an unknown or misspelt field, a wrong type (a string where an integer goes, a map where a list
goes) or a missing required field is an error. kubectl alone does not do this offline:
`kubectl create --dry-run=client` keeps objects unstructured. It then checks what the API server
could not: references inside the release (volume mounts to volumes, probe ports to container
ports, Service and ServiceMonitor selectors to pod and Service labels, the ConfigMap the pods
mount), cryod.json against the keys cryod accepts (read from daemon/cryod/config.cc) and the
shim's flags against cri-shim/flags.cc, and that no container writes a host directory under /etc
without being privileged. The ServiceMonitor and PrometheusRule (CRDs, no types here) get a
small structural check of the fields the chart sets (the rules themselves are checked by
promtool in scripts/check-chart.sh).

`roundtrip` compares an object with what kubectl printed after decoding it into its compiled-in
Go types (kubectl set ... --local): a field that the types do not have is dropped by that
decoder, so it shows up here as missing.
"""
import json
import re
import sys

try:
    import kubernetes.client as kc
except ImportError:  # pragma: no cover
    sys.exit("kubecheck: python3-kubernetes is missing (apt-get install python3-kubernetes)")

# cryod keys and shim flags the chart may emit before their sources have them (accepted with a
# warning). Empty: every key and flag the chart emits must exist in cryod's and the shim's code.
PENDING_CRYOD_KEYS = set()
PENDING_SHIM_FLAGS = set()

# Quantities are strings in the generated types but numbers are valid too (cpu: 1).
QUANTITY_PARENTS = {"limits", "requests", "hard", "capacity"}
QUANTITY_KEYS = {"storage", "sizeLimit"}

errors = []
warnings = []


def err(where, msg):
    errors.append(f"{where}: {msg}")


def load_concatenated_json(path):
    """kubectl -o json prints one JSON document per object, back to back."""
    text = open(path).read()
    dec = json.JSONDecoder()
    out, i = [], 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            return out
        obj, i = dec.raw_decode(text, i)
        if obj.get("kind") == "List":
            out.extend(obj.get("items", []))
        else:
            out.append(obj)


def model_class(name):
    return getattr(kc, name, None)


def walk(value, typ, path, key=None, parent=None):
    """Checks value against a python-kubernetes type string."""
    if value is None:
        return  # null is "unset" for every optional field; required ones are checked below
    if typ.startswith("list["):
        if not isinstance(value, list):
            return err(path, f"expected a list ({typ}), got {type(value).__name__}")
        for i, v in enumerate(value):
            walk(v, typ[5:-1], f"{path}[{i}]", key, parent)
        return
    m = re.match(r"dict\((\w+), (.+)\)$", typ)
    if m:
        if not isinstance(value, dict):
            return err(path, f"expected a map ({typ}), got {type(value).__name__}")
        for k, v in value.items():
            walk(v, m.group(2), f"{path}.{k}", k, key)
        return
    if typ == "str":
        quantity = parent in QUANTITY_PARENTS or key in QUANTITY_KEYS
        if isinstance(value, str) or (quantity and isinstance(value, (int, float))
                                      and not isinstance(value, bool)):
            return
        return err(path, f"expected a string, got {json.dumps(value)}")
    if typ == "int":
        if isinstance(value, int) and not isinstance(value, bool):
            return
        return err(path, f"expected an integer, got {json.dumps(value)}")
    if typ == "float":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return
        return err(path, f"expected a number, got {json.dumps(value)}")
    if typ == "bool":
        if isinstance(value, bool):
            return
        return err(path, f"expected true or false, got {json.dumps(value)}")
    if typ in ("datetime", "date"):
        if isinstance(value, str):
            return
        return err(path, f"expected a timestamp string, got {json.dumps(value)}")
    if typ == "object":
        # IntOrString (ports), RawExtension: anything but a bool or a float port.
        if isinstance(value, bool):
            return err(path, f"expected an integer or a string, got {json.dumps(value)}")
        return
    cls = model_class(typ)
    if cls is None:
        return err(path, f"no type {typ} in python3-kubernetes")
    if not isinstance(value, dict):
        return err(path, f"expected an object ({typ}), got {json.dumps(value)[:60]}")
    by_json = {j: p for p, j in cls.attribute_map.items()}
    for k, v in value.items():
        if k not in by_json:
            err(f"{path}.{k}", f"unknown field (not in {typ})")
            continue
        walk(v, cls.openapi_types[by_json[k]], f"{path}.{k}", k, key)


def check_required(obj, clsname, where):
    # The generated constructors refuse None for required fields and unknown enum values.
    try:
        kc.ApiClient()._ApiClient__deserialize(obj, clsname)
    except (ValueError, TypeError) as e:
        err(where, f"{clsname}: {e}")


def kind_class(obj):
    api, kind = obj.get("apiVersion", ""), obj.get("kind", "")
    version = api.split("/")[-1]
    name = version[0].upper() + version[1:] + kind
    return name if model_class(name) else None


def check_service_monitor(o, where):
    spec = o.get("spec")
    if not isinstance(spec, dict):
        return err(where, "spec missing")
    allowed = {"selector", "namespaceSelector", "endpoints", "jobLabel", "targetLabels",
               "podTargetLabels", "sampleLimit"}
    for k in spec:
        if k not in allowed:
            err(f"{where}.spec.{k}", "unknown field (ServiceMonitor fields known here: "
                f"{', '.join(sorted(allowed))})")
    eps = spec.get("endpoints")
    if not isinstance(eps, list) or not eps:
        err(where, "spec.endpoints must be a non-empty list")
    for i, ep in enumerate(eps or []):
        for k in ep:
            if k not in {"port", "path", "interval", "scheme", "scrapeTimeout", "honorLabels",
                         "relabelings", "metricRelabelings", "targetPort"}:
                err(f"{where}.spec.endpoints[{i}].{k}", "unknown field")
    if not isinstance(spec.get("selector", {}).get("matchLabels"), dict):
        err(where, "spec.selector.matchLabels must be a map")


def check_prometheus_rule(o, where):
    spec = o.get("spec")
    if not isinstance(spec, dict) or set(spec) != {"groups"}:
        return err(where, "spec must hold exactly 'groups'")
    groups = spec["groups"]
    if not isinstance(groups, list) or not groups:
        return err(where, "spec.groups must be a non-empty list")
    for i, g in enumerate(groups):
        gw = f"{where}.spec.groups[{i}]"
        for k in g:
            if k not in {"name", "interval", "rules", "partial_response_strategy", "limit"}:
                err(f"{gw}.{k}", "unknown field")
        if not isinstance(g.get("name"), str) or not isinstance(g.get("rules"), list):
            err(gw, "a group needs a name and a list of rules")
            continue
        for j, r in enumerate(g["rules"]):
            rw = f"{gw}.rules[{j}]"
            for k in r:
                if k not in {"alert", "record", "expr", "for", "keep_firing_for", "labels",
                             "annotations"}:
                    err(f"{rw}.{k}", "unknown field")
            if ("alert" in r) == ("record" in r) or not isinstance(r.get("expr"), (str, int)):
                err(rw, "a rule needs an expr and exactly one of alert, record")
            for m in ("labels", "annotations"):
                if m in r and (not isinstance(r[m], dict)
                               or not all(isinstance(v, str) for v in r[m].values())):
                    err(f"{rw}.{m}", "must map names to strings")


def keys_from_source(path, pattern):
    try:
        return set(re.findall(pattern, open(path).read()))
    except OSError:
        return None


def pod_spec_of(o):
    spec = o.get("spec", {})
    if o["kind"] in ("DaemonSet", "Deployment", "StatefulSet", "Job", "ReplicaSet"):
        return spec.get("template", {}).get("spec", {}), spec.get("template", {}).get(
            "metadata", {}).get("labels", {})
    if o["kind"] == "Pod":
        return spec, o.get("metadata", {}).get("labels", {})
    return None, None


def cross_checks(objs, repo):
    by_kind = {}
    for o in objs:
        by_kind.setdefault(o["kind"], []).append(o)
    configmaps = {o["metadata"]["name"]: o for o in by_kind.get("ConfigMap", [])}
    claims = {o["metadata"]["name"] for o in by_kind.get("PersistentVolumeClaim", [])}
    pod_labels = []
    for o in objs:
        spec, labels = pod_spec_of(o)
        if spec is None:
            continue
        where = f"{o['kind']}/{o['metadata']['name']}"
        pod_labels.append(labels or {})
        sel = o.get("spec", {}).get("selector", {}).get("matchLabels", {})
        if o["kind"] != "Pod" and any((labels or {}).get(k) != v for k, v in sel.items()):
            err(where, f"selector {sel} does not match the template's labels {labels}")
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for v in volumes.values():
            cm = v.get("configMap", {}).get("name")
            if cm and cm not in configmaps:
                err(where, f"volume {v['name']}: ConfigMap {cm} is not part of the release")
            pvc = v.get("persistentVolumeClaim", {}).get("claimName")
            if pvc and pvc not in claims:
                warnings.append(f"{where}: volume {v['name']} uses claim {pvc}, which the "
                                "release does not create (existingClaim)")
        for c in spec.get("initContainers", []) + spec.get("containers", []):
            cwhere = f"{where} container {c['name']}"
            seen = set()
            privileged = (c.get("securityContext") or {}).get("privileged") is True
            for m in c.get("volumeMounts", []):
                if m["name"] not in volumes:
                    err(cwhere, f"volumeMount {m['name']} has no volume")
                host = (volumes.get(m["name"], {}).get("hostPath") or {}).get("path", "")
                if (host == "/etc" or host.startswith("/etc/")) and not m.get("readOnly") \
                        and not privileged:
                    err(cwhere, f"mounts the host's {host} writable without being privileged "
                        "(only a container documented as privileged may write the host's /etc)")
                if m["mountPath"] in seen:
                    err(cwhere, f"two mounts at {m['mountPath']}")
                seen.add(m["mountPath"])
            ports = {p.get("name") for p in c.get("ports", [])}
            for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
                p = c.get(probe) or {}
                for action in ("httpGet", "tcpSocket"):
                    port = (p.get(action) or {}).get("port")
                    if isinstance(port, str) and port not in ports:
                        err(cwhere, f"{probe} uses port {port!r}, not a port of the container")
    services = by_kind.get("Service", [])
    for s in services:
        sel = s["spec"].get("selector", {})
        if not any(all(l.get(k) == v for k, v in sel.items()) for l in pod_labels):
            err(f"Service/{s['metadata']['name']}", f"selector {sel} matches no pod template")
    for sm in by_kind.get("ServiceMonitor", []):
        sel = sm["spec"].get("selector", {}).get("matchLabels", {})
        hits = [s for s in services
                if all(s["metadata"].get("labels", {}).get(k) == v for k, v in sel.items())]
        if not hits:
            err(f"ServiceMonitor/{sm['metadata']['name']}", f"selector {sel} matches no Service")
        for ep in sm["spec"].get("endpoints", []):
            names = {p.get("name") for s in hits for p in s["spec"].get("ports", [])}
            if ep.get("port") not in names:
                err(f"ServiceMonitor/{sm['metadata']['name']}",
                    f"endpoint port {ep.get('port')!r} is not a port of the Service")
    # cryod.json and the shim's flags against the sources of cryod and the shim.
    cryod_keys = keys_from_source(f"{repo}/daemon/cryod/config.cc",
                                  r'(?:Str|Int|Bool)\("([a-z_]+)"|\{"([a-z_]+)", "')
    if cryod_keys is not None:
        cryod_keys = {a or b for a, b in cryod_keys}
    shim_flags = keys_from_source(f"{repo}/cri-shim/flags.cc", r'fs\.[A-Za-z]+\("([a-z-]+)"')
    for name, cm in configmaps.items():
        data = cm.get("data", {})
        if "cryod.json" in data:
            try:
                conf = json.loads(data["cryod.json"])
            except ValueError as e:
                err(f"ConfigMap/{name}", f"cryod.json is not JSON: {e}")
                conf = {}
            if not isinstance(conf, dict):
                err(f"ConfigMap/{name}", "cryod.json is not a JSON object")
                conf = {}
            for k in conf:
                if cryod_keys is None or k in cryod_keys:
                    continue
                if k in PENDING_CRYOD_KEYS:
                    warnings.append(f"cryod.json key {k!r} is not in daemon/cryod/config.cc yet")
                else:
                    err(f"ConfigMap/{name}", f"cryod.json: cryod has no key {k!r} (it would "
                        "refuse to start)")
        if "cri-shim.env" in data:
            for line in data["cri-shim.env"].splitlines():
                if not line.startswith("CRYO_SHIM_ARGS="):
                    continue
                for flag in line.split("=", 1)[1].split():
                    fname = flag[2:].split("=", 1)[0]
                    if shim_flags is None or fname in shim_flags or fname in ("help",):
                        continue
                    if fname in PENDING_SHIM_FLAGS:
                        warnings.append(f"shim flag --{fname} is not in cri-shim/flags.cc yet")
                    else:
                        err(f"ConfigMap/{name}", f"cri-shim.env: the shim has no flag --{fname}")


def cmd_objects(path, repo):
    objs = load_concatenated_json(path)
    if not objs:
        err(path, "no objects")
    names = set()
    for o in objs:
        kind = o.get("kind")
        name = o.get("metadata", {}).get("name")
        where = f"{kind}/{name}"
        key = (o.get("apiVersion"), kind, o.get("metadata", {}).get("namespace"), name)
        if key in names:
            err(where, "defined twice")
        names.add(key)
        if kind == "ServiceMonitor":
            check_service_monitor(o, where)
            continue
        if kind == "PrometheusRule":
            check_prometheus_rule(o, where)
            continue
        cls = kind_class(o)
        if cls is None:
            err(where, f"no Kubernetes type for {o.get('apiVersion')} {kind}")
            continue
        walk(o, cls, where)
        check_required(o, cls, where)
    cross_checks(objs, repo)
    return len(objs)


def subset(a, b, path, out, sentinel=None):
    if sentinel is not None and path.endswith(".image") and b == sentinel:
        return
    if isinstance(a, dict):
        if not isinstance(b, dict):
            return out.append(f"{path}: became {json.dumps(b)[:60]}")
        for k, v in a.items():
            if v is None:
                continue
            if k not in b:
                out.append(f"{path}.{k}: dropped by the typed decode (unknown field?)")
            else:
                subset(v, b[k], f"{path}.{k}", out, sentinel)
    elif isinstance(a, list):
        if not isinstance(b, list) or len(a) != len(b):
            return out.append(f"{path}: list changed")
        for i, (x, y) in enumerate(zip(a, b)):
            subset(x, y, f"{path}[{i}]", out, sentinel)
    elif (isinstance(a, (int, float)) and not isinstance(a, bool) and isinstance(b, str)
          and re.search(r"\.(limits|requests|hard|capacity)\.[^.]+$|\.(storage|sizeLimit)$", path)
          and b == str(a)):
        return  # a number as a quantity comes back as its canonical string: same value
    elif a != b:
        out.append(f"{path}: {json.dumps(a)} became {json.dumps(b)}")


def cmd_roundtrip(inp, outp, sentinel=None):
    ins, outs = load_concatenated_json(inp), load_concatenated_json(outp)
    if len(ins) != len(outs):
        err(outp, f"{len(ins)} objects in, {len(outs)} out")
        return 0
    for a, b in zip(ins, outs):
        diffs = []
        subset(a, b, f"{a['kind']}/{a['metadata']['name']}", diffs, sentinel)
        errors.extend(diffs)
    return len(ins)


def main(argv):
    if len(argv) >= 3 and argv[1] == "objects":
        repo = argv[argv.index("--repo") + 1] if "--repo" in argv else "."
        n = cmd_objects(argv[2], repo)
    elif len(argv) in (4, 5) and argv[1] == "roundtrip":
        n = cmd_roundtrip(argv[2], argv[3], argv[4] if len(argv) == 5 else None)
    else:
        sys.exit(__doc__)
    for w in warnings:
        print(f"kubecheck: warning: {w}", file=sys.stderr)
    for e in errors:
        print(f"kubecheck: error: {e}", file=sys.stderr)
    if errors:
        return 1
    print(f"kubecheck: {argv[1]}: {n} objects ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
