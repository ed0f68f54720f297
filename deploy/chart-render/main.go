// chart-render renders a Helm chart offline, the way `helm template` does, for the subset of
// Helm that the cryo chart uses. It exists because no helm binary can be installed here (only
// Debian packages): Go's text/template plus Debian's sprig library are the same engine and
// function library that Helm builds on, so what is left to match is Helm's own glue, written
// below. Differences from Helm are listed in docs/install.md ("Rendering without helm").
//
//	chart-render [flags] CHART_DIR
//	  --name NAME              release name (default "cryo")
//	  --namespace NS           release namespace (default "default")
//	  -f, --values FILE        values file, repeatable, later files win
//	  --set K=V[,K=V]          override, repeatable (Helm's syntax: a.b=c, a[0]=c, a={x,y})
//	  --set-string K=V         same, value always a string
//	  --kube-version V         .Capabilities.KubeVersion (default v1.30.0)
//	  --api-versions G/V       add to .Capabilities.APIVersions, repeatable
//	  --notes                  also print the rendered NOTES.txt (to stderr)
//	  --skip-schema-validation do not check the values against values.schema.json (as Helm's
//	                           flag of that name)
//	  --no-hooks               leave out the hooks (documents with a helm.sh/hook annotation),
//	                           as `helm template --no-hooks` does
//
// Output: every rendered manifest as `---\n# Source: CHART/templates/FILE\n...`, sorted in
// Helm's install order, then the hooks in the same order, like `helm template`. Exit status 1 with a message on any error.
//
// Features a chart may use: .Values (chart values.yaml coalesced with -f/--set), .Release,
// .Chart, .Capabilities (KubeVersion, APIVersions.Has), .Template, .Files.Get; templates and
// partials (_*.tpl) under templates/; every sprig function except env/expandenv (Helm removes
// them too); Helm's include, tpl, required, toYaml, fromYaml, fromYamlArray, toJson, fromJson,
// fromJsonArray, lookup (always empty, as in `helm template`); values.schema.json, checked
// against the coalesced values before anything renders (schema.go); hooks, printed after the
// manifests (their weights and delete policies are Helm's business at install time, not a
// render's). Refused (an error, never a silent difference): subcharts and dependencies, crds/,
// toToml.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/template"

	"github.com/Masterminds/semver"
	sprig "github.com/Masterminds/sprig"
	"sigs.k8s.io/yaml"
)

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

type options struct {
	chartDir    string
	name        string
	namespace   string
	valueFiles  []string
	sets        []setArg
	kubeVersion string
	apiVersions []string
	notes       bool
	skipSchema  bool
	noHooks     bool
}

type setArg struct {
	expr     string
	asString bool
}

func die(format string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "chart-render: "+format+"\n", a...)
	os.Exit(1)
}

func parseArgs(args []string) options {
	o := options{name: "cryo", namespace: "default", kubeVersion: "v1.30.0"}
	need := func(i int, flag string) string {
		if i+1 >= len(args) {
			die("%s needs a value", flag)
		}
		return args[i+1]
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		flag, val, hasVal := a, "", false
		if strings.HasPrefix(a, "--") {
			if eq := strings.IndexByte(a, '='); eq > 0 {
				flag, val, hasVal = a[:eq], a[eq+1:], true
			}
		}
		get := func() string {
			if hasVal {
				return val
			}
			v := need(i, flag)
			i++
			return v
		}
		switch flag {
		case "--name":
			o.name = get()
		case "--namespace", "-n":
			o.namespace = get()
		case "--values", "-f":
			o.valueFiles = append(o.valueFiles, get())
		case "--set":
			o.sets = append(o.sets, setArg{get(), false})
		case "--set-string":
			o.sets = append(o.sets, setArg{get(), true})
		case "--kube-version":
			o.kubeVersion = get()
		case "--api-versions":
			o.apiVersions = append(o.apiVersions, get())
		case "--notes":
			o.notes = true
		case "--skip-schema-validation":
			o.skipSchema = true
		case "--no-hooks":
			o.noHooks = true
		case "-h", "--help":
			fmt.Println("usage: chart-render [--name N] [--namespace NS] [-f FILE]... [--set K=V]... " +
				"[--set-string K=V]... [--kube-version V] [--api-versions G/V]... [--notes] " +
				"[--skip-schema-validation] [--no-hooks] CHART_DIR")
			os.Exit(0)
		default:
			if strings.HasPrefix(a, "-") {
				die("unknown flag %s", a)
			}
			if o.chartDir != "" {
				die("more than one chart directory given (%s, %s)", o.chartDir, a)
			}
			o.chartDir = a
		}
	}
	if o.chartDir == "" {
		die("no chart directory given")
	}
	// Helm: release names are DNS-1123 labels of at most 53 characters.
	if len(o.name) > 53 || !regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`).MatchString(o.name) {
		die("invalid release name %q: a DNS-1123 label of at most 53 characters", o.name)
	}
	return o
}

// ---------------------------------------------------------------------------------------------
// Values

// readYAMLMap parses YAML the way Helm does: through JSON, so every number is a float64.
func readYAMLMap(data []byte, what string) map[string]interface{} {
	m := map[string]interface{}{}
	if err := yaml.Unmarshal(data, &m); err != nil {
		die("%s: %v", what, err)
	}
	if m == nil {
		m = map[string]interface{}{}
	}
	return m
}

// mergeMaps: b over a, maps merged recursively (Helm's mergeMaps for -f files and --set).
func mergeMaps(a, b map[string]interface{}) map[string]interface{} {
	out := make(map[string]interface{}, len(a))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if vm, ok := v.(map[string]interface{}); ok {
			if om, ok := out[k].(map[string]interface{}); ok {
				out[k] = mergeMaps(om, vm)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// coalesce: user values over chart defaults. A null user value deletes the default (Helm's
// coalesceValues); maps merge; anything else replaces.
func coalesce(user, defaults map[string]interface{}) map[string]interface{} {
	out := map[string]interface{}{}
	for k, v := range defaults {
		out[k] = v
	}
	for k, v := range user {
		if v == nil {
			delete(out, k)
			continue
		}
		um, uok := v.(map[string]interface{})
		dm, dok := out[k].(map[string]interface{})
		if uok && dok {
			out[k] = coalesce(um, dm)
		} else {
			if !uok && dok {
				fmt.Fprintf(os.Stderr, "chart-render: warning: overwriting table %q with a non-table value\n", k)
			}
			out[k] = v
		}
	}
	// Nulls inside default tables that the user did not touch are dropped too (Helm does).
	for k, v := range out {
		if v == nil {
			delete(out, k)
		}
	}
	return out
}

// splitUnescaped splits s at sep, honouring backslash escapes (which are kept for later).
func splitUnescaped(s string, sep byte, braces bool) []string {
	var parts []string
	depth := 0
	start := 0
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\':
			i++
		case braces && s[i] == '{':
			depth++
		case braces && s[i] == '}':
			depth--
		case s[i] == sep && depth == 0:
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:])
}

func unescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// typedValue follows Helm's strvals: integers become int64, true/false bools, null nil.
func typedValue(s string, asString bool) interface{} {
	if asString {
		return s
	}
	switch s {
	case "true":
		return true
	case "false":
		return false
	case "null":
		return nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil && (s == "0" || !strings.HasPrefix(s, "0")) {
		return n
	}
	return s
}

var indexRe = regexp.MustCompile(`^(.*)\[(\d+)\]$`)

// applySet applies one --set expression (several comma-separated assignments) to m.
func applySet(m map[string]interface{}, expr string, asString bool) error {
	for _, assign := range splitUnescaped(expr, ',', true) {
		if assign == "" {
			continue
		}
		eq := -1
		for i := 0; i < len(assign); i++ {
			if assign[i] == '\\' {
				i++
				continue
			}
			if assign[i] == '=' {
				eq = i
				break
			}
		}
		if eq < 0 {
			return fmt.Errorf("key %q has no value", assign)
		}
		key, raw := assign[:eq], assign[eq+1:]
		var val interface{}
		if strings.HasPrefix(raw, "{") && strings.HasSuffix(raw, "}") {
			list := []interface{}{}
			if inner := raw[1 : len(raw)-1]; inner != "" {
				for _, item := range splitUnescaped(inner, ',', false) {
					list = append(list, typedValue(unescape(item), asString))
				}
			}
			val = list
		} else {
			val = typedValue(unescape(raw), asString)
		}
		if err := setPath(m, splitUnescaped(key, '.', false), val); err != nil {
			return fmt.Errorf("%s: %v", key, err)
		}
	}
	return nil
}

func setPath(m map[string]interface{}, keys []string, val interface{}) error {
	k := keys[0]
	idx := -1
	if sub := indexRe.FindStringSubmatch(k); sub != nil {
		k = sub[1]
		idx, _ = strconv.Atoi(sub[2])
	}
	k = unescape(k)
	if k == "" {
		return errors.New("empty key")
	}
	last := len(keys) == 1
	if idx < 0 {
		if last {
			m[k] = val
			return nil
		}
		child, ok := m[k].(map[string]interface{})
		if !ok {
			child = map[string]interface{}{}
			m[k] = child
		}
		return setPath(child, keys[1:], val)
	}
	list, _ := m[k].([]interface{})
	for len(list) <= idx {
		list = append(list, nil)
	}
	if last {
		list[idx] = val
	} else {
		child, ok := list[idx].(map[string]interface{})
		if !ok {
			child = map[string]interface{}{}
			list[idx] = child
		}
		if err := setPath(child, keys[1:], val); err != nil {
			return err
		}
	}
	m[k] = list
	return nil
}

// ---------------------------------------------------------------------------------------------
// Chart

// Metadata mirrors the fields of Helm's chart.Metadata that templates read as .Chart.X.
type Metadata struct {
	APIVersion   string            `json:"apiVersion"`
	Name         string            `json:"name"`
	Version      string            `json:"version"`
	AppVersion   string            `json:"appVersion"`
	KubeVersion  string            `json:"kubeVersion"`
	Description  string            `json:"description"`
	Type         string            `json:"type"`
	Home         string            `json:"home"`
	Keywords     []string          `json:"keywords"`
	Sources      []string          `json:"sources"`
	Annotations  map[string]string `json:"annotations"`
	Dependencies []interface{}     `json:"dependencies"`
	Icon         string            `json:"icon"`
	Maintainers  []Maintainer      `json:"maintainers"`
	Deprecated   bool              `json:"deprecated"`
}

// Maintainer is one entry of Chart.yaml's maintainers.
type Maintainer struct {
	Name  string `json:"name"`
	Email string `json:"email"`
	URL   string `json:"url"`
}

var emailRe = regexp.MustCompile(`^[^@\s]+@[^@\s]+\.[^@\s]+$`)

// checkMetadata: what Helm's Metadata.Validate refuses at install (maintainers need a name) and
// what `helm lint` reports as errors for the URL fields (home, sources, icon, maintainer
// emails and URLs must parse).
func checkMetadata(md Metadata) error {
	isURL := func(s string) bool {
		u, err := url.ParseRequestURI(s)
		return err == nil && u.Scheme != ""
	}
	if md.Home != "" && !isURL(md.Home) {
		return fmt.Errorf("home %q is not a URL", md.Home)
	}
	for _, s := range md.Sources {
		if !isURL(s) {
			return fmt.Errorf("sources: %q is not a URL", s)
		}
	}
	if md.Icon != "" && !isURL(md.Icon) {
		return fmt.Errorf("icon %q is not a URL", md.Icon)
	}
	for i, m := range md.Maintainers {
		if m.Name == "" {
			return fmt.Errorf("maintainers[%d]: a maintainer needs a name", i)
		}
		if m.Email != "" && !emailRe.MatchString(m.Email) {
			return fmt.Errorf("maintainers[%d]: invalid email %q", i, m.Email)
		}
		if m.URL != "" && !isURL(m.URL) {
			return fmt.Errorf("maintainers[%d]: invalid url %q", i, m.URL)
		}
	}
	return nil
}

// Files gives templates the chart's non-template files, as Helm's .Files does.
type Files map[string][]byte

func (f Files) Get(name string) string      { return string(f[name]) }
func (f Files) GetBytes(name string) []byte { return f[name] }

// VersionSet is .Capabilities.APIVersions.
type VersionSet []string

func (v VersionSet) Has(apiVersion string) bool {
	for _, x := range v {
		if x == apiVersion {
			return true
		}
	}
	return false
}

// KubeVersion is .Capabilities.KubeVersion.
type KubeVersion struct {
	Version    string
	Major      string
	Minor      string
	GitVersion string
}

func (k KubeVersion) String() string { return k.Version }

// Built-in API versions that `helm template` reports by default (the stable ones that matter).
var defaultAPIVersions = []string{
	"v1", "apps/v1", "batch/v1", "policy/v1", "rbac.authorization.k8s.io/v1",
	"networking.k8s.io/v1", "storage.k8s.io/v1", "scheduling.k8s.io/v1", "coordination.k8s.io/v1",
	"node.k8s.io/v1", "autoscaling/v2", "apiextensions.k8s.io/v1", "admissionregistration.k8s.io/v1",
	"discovery.k8s.io/v1", "events.k8s.io/v1", "certificates.k8s.io/v1",
}

type chartFile struct {
	name    string // CHART/templates/x.yaml
	content string
}

func loadChart(dir string) (Metadata, map[string]interface{}, []byte, []chartFile, Files) {
	var md Metadata
	raw, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		die("%v", err)
	}
	if err := yaml.Unmarshal(raw, &md); err != nil {
		die("Chart.yaml: %v", err)
	}
	if md.APIVersion != "v2" {
		die("Chart.yaml: apiVersion %q: only v2 charts are supported", md.APIVersion)
	}
	if md.Name == "" || md.Version == "" {
		die("Chart.yaml: name and version are required")
	}
	if _, err := semver.StrictNewVersion(md.Version); err != nil {
		die("Chart.yaml: version %q is not SemVer 2: %v", md.Version, err)
	}
	if len(md.Dependencies) > 0 {
		die("Chart.yaml: dependencies are not supported by this renderer")
	}
	if err := checkMetadata(md); err != nil {
		die("Chart.yaml: %v", err)
	}
	for _, unsupported := range []string{"charts", "crds", "requirements.yaml"} {
		if _, err := os.Stat(filepath.Join(dir, unsupported)); err == nil {
			die("%s is not supported by this renderer", unsupported)
		}
	}
	valuesRaw, err := os.ReadFile(filepath.Join(dir, "values.yaml"))
	if err != nil && !os.IsNotExist(err) {
		die("%v", err)
	}
	values := readYAMLMap(valuesRaw, "values.yaml")
	schema, err := os.ReadFile(filepath.Join(dir, "values.schema.json"))
	if err != nil && !os.IsNotExist(err) {
		die("%v", err)
	}

	var templates []chartFile
	files := Files{}
	err = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if strings.HasPrefix(rel, "templates/") {
			templates = append(templates, chartFile{md.Name + "/" + rel, string(data)})
		} else if rel != "Chart.yaml" && rel != "values.yaml" && rel != "values.schema.json" {
			files[rel] = data
		}
		return nil
	})
	if err != nil {
		die("%v", err)
	}
	sort.Slice(templates, func(i, j int) bool { return templates[i].name < templates[j].name })
	return md, values, schema, templates, files
}

// ---------------------------------------------------------------------------------------------
// Functions Helm adds to sprig's

func toYAML(v interface{}) string {
	data, err := yaml.Marshal(v)
	if err != nil {
		return "" // Helm swallows the error too
	}
	return strings.TrimSuffix(string(data), "\n")
}

func fromYAML(s string) map[string]interface{} {
	m := map[string]interface{}{}
	if err := yaml.Unmarshal([]byte(s), &m); err != nil {
		m["Error"] = err.Error()
	}
	return m
}

func fromYAMLArray(s string) []interface{} {
	a := []interface{}{}
	if err := yaml.Unmarshal([]byte(s), &a); err != nil {
		a = []interface{}{err.Error()}
	}
	return a
}

func toJSON(v interface{}) string {
	data, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(data)
}

func fromJSON(s string) map[string]interface{} {
	m := map[string]interface{}{}
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		m["Error"] = err.Error()
	}
	return m
}

func fromJSONArray(s string) []interface{} {
	a := []interface{}{}
	if err := json.Unmarshal([]byte(s), &a); err != nil {
		a = []interface{}{err.Error()}
	}
	return a
}

func required(msg string, v interface{}) (interface{}, error) {
	if v == nil {
		return v, errors.New(msg)
	}
	if s, ok := v.(string); ok && s == "" {
		return v, errors.New(msg)
	}
	return v, nil
}

type renderer struct {
	tmpl     *template.Template
	top      map[string]interface{}
	chart    string
	depth    int
	maxDepth int
}

func (r *renderer) funcs() template.FuncMap {
	f := sprig.TxtFuncMap()
	delete(f, "env")
	delete(f, "expandenv")
	f["toYaml"] = toYAML
	f["fromYaml"] = fromYAML
	f["fromYamlArray"] = fromYAMLArray
	f["toJson"] = toJSON
	f["fromJson"] = fromJSON
	f["fromJsonArray"] = fromJSONArray
	f["required"] = required
	f["toToml"] = func(interface{}) (string, error) {
		return "", errors.New("toToml is not supported by this renderer")
	}
	f["lookup"] = func(string, string, string, string) (map[string]interface{}, error) {
		return map[string]interface{}{}, nil
	}
	// Replaced after parsing, when the template set exists (closures over r).
	f["include"] = func(string, interface{}) (string, error) { return "", nil }
	f["tpl"] = func(string, interface{}) (string, error) { return "", nil }
	return f
}

func (r *renderer) include(name string, data interface{}) (string, error) {
	if r.depth >= r.maxDepth {
		return "", fmt.Errorf("rendering template has a nested reference name: %s: too deep", name)
	}
	r.depth++
	defer func() { r.depth-- }()
	var buf bytes.Buffer
	if err := r.tmpl.ExecuteTemplate(&buf, name, data); err != nil {
		return "", err
	}
	return buf.String(), nil
}

// tpl renders a string as a template, with the chart's named templates available (Helm
// clones the set and parses the text into it).
func (r *renderer) tpl(text string, data interface{}) (string, error) {
	t, err := r.tmpl.Clone()
	if err != nil {
		return "", err
	}
	t, err = t.New("tpl").Parse(text)
	if err != nil {
		return "", fmt.Errorf("cannot parse template %q: %v", text, err)
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, data); err != nil {
		return "", fmt.Errorf("error calling tpl: %v", err)
	}
	return strings.ReplaceAll(buf.String(), "<no value>", ""), nil
}

// ---------------------------------------------------------------------------------------------
// Manifests

// Helm's install order (releaseutil.InstallOrder), kinds not listed go last.
var installOrder = []string{
	"PriorityClass", "Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange",
	"PodSecurityPolicy", "PodDisruptionBudget", "ServiceAccount", "Secret", "SecretList",
	"ConfigMap", "StorageClass", "PersistentVolume", "PersistentVolumeClaim",
	"CustomResourceDefinition", "ClusterRole", "ClusterRoleList", "ClusterRoleBinding",
	"ClusterRoleBindingList", "Role", "RoleList", "RoleBinding", "RoleBindingList", "Service",
	"DaemonSet", "Pod", "ReplicationController", "ReplicaSet", "Deployment",
	"HorizontalPodAutoscaler", "StatefulSet", "Job", "CronJob", "IngressClass", "Ingress",
	"APIService",
}

var docSep = regexp.MustCompile(`(?:^|\s*\n)---\s*`)

type manifest struct {
	source string
	body   string
	kind   string
	order  int
	seq    int
}

func main() {
	o := parseArgs(os.Args[1:])
	md, defaults, schema, templates, files := loadChart(o.chartDir)

	user := map[string]interface{}{}
	for _, f := range o.valueFiles {
		data, err := os.ReadFile(f)
		if err != nil {
			die("%v", err)
		}
		user = mergeMaps(user, readYAMLMap(data, f))
	}
	for _, s := range o.sets {
		if err := applySet(user, s.expr, s.asString); err != nil {
			die("--set %s: %v", s.expr, err)
		}
	}
	values := coalesce(user, defaults)
	if schema != nil && !o.skipSchema {
		if err := validateValues(md.Name, schema, values); err != nil {
			die("%v", err)
		}
	}

	kv, err := semver.NewVersion(o.kubeVersion)
	if err != nil {
		die("--kube-version %q: %v", o.kubeVersion, err)
	}
	if md.KubeVersion != "" {
		c, err := semver.NewConstraint(md.KubeVersion)
		if err != nil {
			die("Chart.yaml: kubeVersion %q: %v", md.KubeVersion, err)
		}
		if !c.Check(kv) {
			die("chart requires kubeVersion: %s which is incompatible with Kubernetes %s",
				md.KubeVersion, o.kubeVersion)
		}
	}
	caps := map[string]interface{}{
		"KubeVersion": KubeVersion{
			Version: "v" + kv.String(), Major: strconv.FormatUint(kv.Major(), 10),
			Minor: strconv.FormatUint(kv.Minor(), 10), GitVersion: "v" + kv.String(),
		},
		"APIVersions": VersionSet(append(append([]string{}, defaultAPIVersions...), o.apiVersions...)),
		"HelmVersion": map[string]interface{}{"Version": "v3-compatible (chart-render)"},
	}
	release := map[string]interface{}{
		"Name": o.name, "Namespace": o.namespace, "IsInstall": true, "IsUpgrade": false,
		"Revision": 1, "Service": "Helm",
	}

	r := &renderer{chart: md.Name, maxDepth: 1000}
	fm := r.funcs()
	root := template.New("gotpl").Option("missingkey=zero").Funcs(fm)
	for _, t := range templates {
		if _, err := root.New(t.name).Parse(t.content); err != nil {
			die("parse error in %q: %v", t.name, err)
		}
	}
	r.tmpl = root
	root.Funcs(template.FuncMap{"include": r.include, "tpl": r.tpl})

	var out []manifest
	seq := 0
	for _, t := range templates {
		base := path.Base(t.name)
		if strings.HasPrefix(base, "_") {
			continue
		}
		isNotes := base == "NOTES.txt"
		if !isNotes && !strings.HasSuffix(base, ".yaml") && !strings.HasSuffix(base, ".yml") {
			continue // Helm renders them but installs nothing that is not YAML
		}
		data := map[string]interface{}{
			"Values": values, "Release": release, "Chart": md, "Capabilities": caps, "Files": files,
			"Template": map[string]interface{}{"Name": t.name, "BasePath": md.Name + "/templates"},
		}
		var buf bytes.Buffer
		if err := root.ExecuteTemplate(&buf, t.name, data); err != nil {
			die("%v", err)
		}
		text := strings.ReplaceAll(buf.String(), "<no value>", "")
		if isNotes {
			if o.notes {
				fmt.Fprintf(os.Stderr, "NOTES:\n%s\n", text)
			}
			continue
		}
		if strings.TrimSpace(text) == "" {
			continue
		}
		for _, doc := range docSep.Split(text, -1) {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			var head struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Metadata   struct {
					Name        string            `json:"name"`
					Annotations map[string]string `json:"annotations"`
				} `json:"metadata"`
			}
			if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
				die("YAML parse error on %s: %v", t.name, err)
			}
			if head.Kind == "" || head.APIVersion == "" {
				// Helm installs nothing without a kind; such a document is an error there too.
				die("%s: a document has no apiVersion or kind:\n%s", t.name, doc)
			}
			_, hook := head.Metadata.Annotations["helm.sh/hook"]
			if hook && o.noHooks {
				continue
			}
			order := len(installOrder)
			for i, k := range installOrder {
				if k == head.Kind {
					order = i
				}
			}
			if hook {
				order += len(installOrder) + 1 // after every manifest, as helm template prints them
			}
			out = append(out, manifest{t.name, strings.TrimSpace(doc), head.Kind, order, seq})
			seq++
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].order != out[j].order {
			return out[i].order < out[j].order
		}
		return out[i].seq < out[j].seq
	})
	var w bytes.Buffer
	for _, m := range out {
		fmt.Fprintf(&w, "---\n# Source: %s\n%s\n", m.source, m.body)
	}
	os.Stdout.Write(w.Bytes())
}
