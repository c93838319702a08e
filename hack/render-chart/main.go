// render-chart: `helm template` for machines without helm, good enough to test the chart.
//
// It renders charts/lockgate with Go's text/template and sprig, as Helm does, plus Helm's
// own functions (include, tpl, required, toYaml, toJson, fromJson, fromJsonArray, lookup
// returning nothing, as under `helm template`). Values are values.yaml with each -f file
// merged over it. It does not validate against values.schema.json (the tests do that)
// and knows no Capabilities beyond a fixed Kubernetes version.
//
// Build (Debian: golang-go, golang-github-masterminds-sprig-dev, golang-gopkg-yaml.v3-dev):
//
//	GO111MODULE=off GOPATH=/usr/share/gocode go build -o render-chart ./hack/render-chart
//	render-chart -chart charts/lockgate -name lockgate -namespace lockgate [-f values.yaml …]
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig"
	"gopkg.in/yaml.v3"
)

type files []string

func (f *files) String() string     { return strings.Join(*f, ",") }
func (f *files) Set(v string) error { *f = append(*f, v); return nil }

func main() {
	chart := flag.String("chart", "charts/lockgate", "chart folder")
	name := flag.String("name", "lockgate", "release name")
	namespace := flag.String("namespace", "default", "release namespace")
	notes := flag.Bool("notes", false, "print the rendered NOTES.txt instead of the objects")
	var valueFiles files
	flag.Var(&valueFiles, "f", "values file merged over values.yaml (repeatable)")
	flag.Parse()
	if err := run(*chart, *name, *namespace, valueFiles, *notes); err != nil {
		fmt.Fprintln(os.Stderr, "render-chart:", err)
		os.Exit(1)
	}
}

func run(chart, name, namespace string, valueFiles []string, notes bool) error {
	values, err := readYAML(filepath.Join(chart, "values.yaml"))
	if err != nil {
		return err
	}
	for _, path := range valueFiles {
		override, err := readYAML(path)
		if err != nil {
			return err
		}
		values = merge(values, override)
	}
	meta, err := readYAML(filepath.Join(chart, "Chart.yaml"))
	if err != nil {
		return err
	}
	paths, err := templateFiles(filepath.Join(chart, "templates"))
	if err != nil {
		return err
	}
	root := template.New("chart").Option("missingkey=zero")
	root.Funcs(funcs(root))
	for _, path := range paths {
		text, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(filepath.Dir(chart), path)
		if _, err := root.New(filepath.ToSlash(rel)).Parse(string(text)); err != nil {
			return err
		}
	}
	base := filepath.ToSlash(filepath.Join(filepath.Base(chart), "templates"))
	for _, path := range paths {
		rel, _ := filepath.Rel(filepath.Dir(chart), path)
		rel = filepath.ToSlash(rel)
		isNotes := filepath.Base(rel) == "NOTES.txt"
		if strings.HasPrefix(filepath.Base(rel), "_") || isNotes != notes {
			continue
		}
		data := map[string]interface{}{
			"Values": values,
			"Release": map[string]interface{}{
				"Name": name, "Namespace": namespace, "Service": "Helm",
				"IsInstall": true, "IsUpgrade": false, "Revision": 1,
			},
			"Chart": map[string]interface{}{
				"Name": meta["name"], "Version": meta["version"], "AppVersion": meta["appVersion"],
			},
			"Template":     map[string]interface{}{"Name": rel, "BasePath": base},
			"Capabilities": map[string]interface{}{"KubeVersion": map[string]interface{}{"Version": "v1.28.0"}},
		}
		var out bytes.Buffer
		if err := root.ExecuteTemplate(&out, rel, data); err != nil {
			return err
		}
		if notes {
			fmt.Print(out.String())
			continue
		}
		if strings.TrimSpace(out.String()) == "" {
			continue
		}
		fmt.Printf("---\n# Source: %s\n%s\n", rel, strings.TrimSpace(out.String()))
	}
	return nil
}

func templateFiles(dir string) ([]string, error) {
	var out []string
	err := filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			out = append(out, path)
		}
		return err
	})
	sort.Strings(out)
	return out, err
}

func readYAML(path string) (map[string]interface{}, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]interface{}{}
	if err := yaml.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

// merge is Helm's: maps merge key by key, anything else in the override wins.
func merge(base, override map[string]interface{}) map[string]interface{} {
	out := map[string]interface{}{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range override {
		if bm, ok := out[k].(map[string]interface{}); ok {
			if om, ok := v.(map[string]interface{}); ok {
				out[k] = merge(bm, om)
				continue
			}
		}
		out[k] = v
	}
	return out
}

func funcs(root *template.Template) template.FuncMap {
	f := sprig.TxtFuncMap()
	delete(f, "env")
	delete(f, "expandenv")
	f["include"] = func(name string, data interface{}) (string, error) {
		var buf bytes.Buffer
		err := root.ExecuteTemplate(&buf, name, data)
		return buf.String(), err
	}
	f["tpl"] = func(text string, data interface{}) (string, error) {
		t, err := root.Clone()
		if err != nil {
			return "", err
		}
		if t, err = t.New("tpl").Parse(text); err != nil {
			return "", err
		}
		var buf bytes.Buffer
		err = t.Execute(&buf, data)
		return buf.String(), err
	}
	f["required"] = func(msg string, v interface{}) (interface{}, error) {
		if v == nil || v == "" {
			return nil, fmt.Errorf("%s", msg)
		}
		return v, nil
	}
	f["fail"] = func(msg string) (string, error) { return "", fmt.Errorf("%s", msg) }
	f["lookup"] = func(apiVersion, kind, namespace, name string) map[string]interface{} {
		return map[string]interface{}{} // as under `helm template`: nothing exists
	}
	f["toYaml"] = func(v interface{}) string {
		var buf bytes.Buffer
		enc := yaml.NewEncoder(&buf)
		enc.SetIndent(2)
		if err := enc.Encode(v); err != nil {
			return ""
		}
		return strings.TrimSuffix(buf.String(), "\n")
	}
	f["toJson"] = func(v interface{}) string {
		out, err := json.Marshal(v)
		if err != nil {
			return ""
		}
		return string(out)
	}
	f["fromJson"] = func(s string) map[string]interface{} {
		out := map[string]interface{}{}
		if err := json.Unmarshal([]byte(s), &out); err != nil {
			out["Error"] = err.Error()
		}
		return out
	}
	f["fromJsonArray"] = func(s string) []interface{} {
		var out []interface{}
		if err := json.Unmarshal([]byte(s), &out); err != nil {
			return []interface{}{err.Error()}
		}
		return out
	}
	return f
}
