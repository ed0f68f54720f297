package main

// values.schema.json, checked the way Helm 3 checks it: after the chart's values.yaml has been
// coalesced with -f and --set (so what is validated is exactly what templates see), with the
// library Helm 3 used for draft-04/06/07 schemas (github.com/xeipuuv/gojsonschema, Debian's
// golang-github-xeipuuv-gojsonschema-dev), and with Helm's message: one "- PATH: WHAT" line
// per violation under the chart's name. Helm >= 3.18 switched to another library for schemas
// of newer drafts; for a draft-07 schema the verdict is the same, only the wording differs.

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/xeipuuv/gojsonschema"
	"sigs.k8s.io/yaml"
)

// validateValues returns nil when values satisfy schemaJSON, else Helm's error text
// (chartutil.ValidateAgainstSchema wrapped by ToRenderValues).
func validateValues(chartName string, schemaJSON []byte, values map[string]interface{}) (reterr error) {
	defer func() {
		// gojsonschema panics on some malformed schemas; Helm recovers the same way.
		if r := recover(); r != nil {
			reterr = fmt.Errorf("unable to validate schema: %s", r)
		}
	}()
	// Through YAML and back to JSON, as Helm does, so numbers and types match its view.
	valuesYAML, err := yaml.Marshal(values)
	if err != nil {
		return err
	}
	valuesJSON, err := yaml.YAMLToJSON(valuesYAML)
	if err != nil {
		return err
	}
	if bytes.Equal(valuesJSON, []byte("null")) {
		valuesJSON = []byte("{}")
	}
	result, err := gojsonschema.Validate(gojsonschema.NewBytesLoader(schemaJSON),
		gojsonschema.NewBytesLoader(valuesJSON))
	if err != nil {
		return fmt.Errorf("values.schema.json: %v", err)
	}
	if result.Valid() {
		return nil
	}
	// Helm prints them in the library's order, which follows Go map order for some rules;
	// sorted here so that the same values always give the same message.
	var lines []string
	for _, e := range result.Errors() {
		lines = append(lines, fmt.Sprintf("- %s\n", e))
	}
	sort.Strings(lines)
	return errors.New("values don't meet the specifications of the schema(s) in the following " +
		"chart(s):\n" + chartName + ":\n" + strings.Join(lines, ""))
}
