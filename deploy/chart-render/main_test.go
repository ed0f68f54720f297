package main

import (
	"reflect"
	"strings"
	"testing"
	"text/template"
)

func TestSetTypesFollowHelm(t *testing.T) {
	m := map[string]interface{}{}
	if err := applySet(m, "a.b=10,a.c=true,a.d=null,a.e=010,a.f=x\\,y,g={1,two},h[1].i=z", false); err != nil {
		t.Fatal(err)
	}
	a := m["a"].(map[string]interface{})
	if a["b"] != int64(10) || a["c"] != true || a["d"] != nil || a["e"] != "010" || a["f"] != "x,y" {
		t.Fatalf("typed values: %#v", a)
	}
	if !reflect.DeepEqual(m["g"], []interface{}{int64(1), "two"}) {
		t.Fatalf("list: %#v", m["g"])
	}
	h := m["h"].([]interface{})
	if len(h) != 2 || h[0] != nil || h[1].(map[string]interface{})["i"] != "z" {
		t.Fatalf("indexed: %#v", h)
	}
	s := map[string]interface{}{}
	if err := applySet(s, "tag=1.2", true); err != nil || s["tag"] != "1.2" {
		t.Fatalf("set-string: %#v %v", s, err)
	}
	if err := applySet(s, "novalue", false); err == nil {
		t.Fatal("an assignment without = was accepted")
	}
}

func TestValuesFileNumbersAreFloats(t *testing.T) {
	// Helm reads values through JSON: 1000000 prints as 1e+06 unless a template converts it.
	m := readYAMLMap([]byte("num: 1000000\n"), "test")
	if _, ok := m["num"].(float64); !ok {
		t.Fatalf("want float64, got %T", m["num"])
	}
}

func TestCoalesceNullDeletesAndMapsMerge(t *testing.T) {
	defaults := map[string]interface{}{
		"a": map[string]interface{}{"x": 1.0, "y": 2.0},
		"b": "keep",
		"c": "drop",
	}
	user := map[string]interface{}{"a": map[string]interface{}{"y": 3.0}, "c": nil}
	got := coalesce(user, defaults)
	want := map[string]interface{}{"a": map[string]interface{}{"x": 1.0, "y": 3.0}, "b": "keep"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %#v", got)
	}
}

func TestIncludeTplRequiredToYaml(t *testing.T) {
	r := &renderer{maxDepth: 10}
	root := template.New("gotpl").Option("missingkey=zero").Funcs(r.funcs())
	template.Must(root.New("c/templates/_h.tpl").Parse(`{{ define "n" }}{{ .x | upper }}{{ end }}`))
	template.Must(root.New("c/templates/a.yaml").Parse(
		`{{ include "n" . }}|{{ tpl "{{ .x }}-{{ include \"n\" . }}" . }}|{{ toYaml .m | nindent 2 }}`))
	template.Must(root.New("c/templates/b.yaml").Parse(`{{ required "need y" .y }}`))
	r.tmpl = root
	root.Funcs(template.FuncMap{"include": r.include, "tpl": r.tpl})
	var b strings.Builder
	data := map[string]interface{}{"x": "ab", "m": map[string]interface{}{"k": []int{1}}}
	if err := root.ExecuteTemplate(&b, "c/templates/a.yaml", data); err != nil {
		t.Fatal(err)
	}
	if want := "AB|ab-AB|\n  k:\n  - 1"; b.String() != want {
		t.Fatalf("got %q want %q", b.String(), want)
	}
	err := root.ExecuteTemplate(&b, "c/templates/b.yaml", data)
	if err == nil || !strings.Contains(err.Error(), "need y") {
		t.Fatalf("required: %v", err)
	}
	if _, ok := r.funcs()["env"]; ok {
		t.Fatal("env must not be available (Helm removes it)")
	}
}

func TestDocSplit(t *testing.T) {
	docs := docSep.Split("\n---\na: 1\n---\nb: 2\n---   \n\nc: 3\n---\n", -1)
	var kept []string
	for _, d := range docs {
		if strings.TrimSpace(d) != "" {
			kept = append(kept, strings.TrimSpace(d))
		}
	}
	if !reflect.DeepEqual(kept, []string{"a: 1", "b: 2", "c: 3"}) {
		t.Fatalf("got %q", kept)
	}
}

func TestSchemaValidationLikeHelm(t *testing.T) {
	schema := []byte(`{
	  "$schema": "http://json-schema.org/draft-07/schema#",
	  "type": "object",
	  "additionalProperties": false,
	  "properties": {
	    "port": {"type": "integer", "minimum": 1, "maximum": 65535},
	    "keep": {"type": "integer", "minimum": 0},
	    "level": {"enum": ["debug", "info"]},
	    "sub": {"type": "object", "additionalProperties": false,
	            "properties": {"name": {"type": "string"}}}
	  }
	}`)
	defaults := readYAMLMap([]byte("port: 9464\nkeep: 3\nlevel: info\nsub: {name: x}\n"), "test")
	// Values from a file are float64 and --set integers int64: both are JSON integers.
	if err := validateValues("c", schema, coalesce(map[string]interface{}{"keep": int64(5)}, defaults)); err != nil {
		t.Fatalf("valid values refused: %v", err)
	}
	cases := []struct {
		set, want string
	}{
		{"keep=five", "- keep: Invalid type. Expected: integer, given: string"},
		{"keep=-1", "- keep: Must be greater than or equal to 0"},
		{"port=70000", "- port: Must be less than or equal to 65535"},
		{"level=verbose", "- level: level must be one of the following"},
		{"sub.nmae=y", "- sub: Additional property nmae is not allowed"},
		{"kep=3", "- (root): Additional property kep is not allowed"},
	}
	for _, c := range cases {
		user := map[string]interface{}{}
		if err := applySet(user, c.set, false); err != nil {
			t.Fatal(err)
		}
		err := validateValues("c", schema, coalesce(user, defaults))
		if err == nil {
			t.Errorf("--set %s: accepted", c.set)
			continue
		}
		head := "values don't meet the specifications of the schema(s) in the following chart(s):\nc:\n"
		if !strings.HasPrefix(err.Error(), head) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--set %s: got %q, want a line %q under Helm's heading", c.set, err, c.want)
		}
	}
	// A null deletes the default before validation (Helm coalesces first).
	if err := validateValues("c", schema, coalesce(map[string]interface{}{"port": nil}, defaults)); err != nil {
		t.Fatalf("null value: %v", err)
	}
	if err := validateValues("c", []byte(`{"type": `), defaults); err == nil {
		t.Fatal("a schema that is not JSON was accepted")
	}
}

func TestChartMetadataChecks(t *testing.T) {
	ok := Metadata{Home: "https://cryo.invalid/", Sources: []string{"https://cryo.invalid/src"},
		Icon: "data:image/svg+xml;base64,PHN2Zy8+", Maintainers: []Maintainer{{Name: "a", Email: "a@b.invalid"}}}
	if err := checkMetadata(ok); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []Metadata{
		{Home: "cryo.invalid"},
		{Sources: []string{"not a url"}},
		{Maintainers: []Maintainer{{Email: "a@b.invalid"}}},
		{Maintainers: []Maintainer{{Name: "a", Email: "nope"}}},
	} {
		if err := checkMetadata(bad); err == nil {
			t.Errorf("accepted %+v", bad)
		}
	}
}
