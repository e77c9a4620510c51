package k8s_test

import (
	"encoding/json"
	"io/fs"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

var (
	metricName    = regexp.MustCompile(`\bspecstar_[a-z0-9_]+`)
	definedMetric = regexp.MustCompile(`"(specstar_[a-z0-9_]+)"`)
)

// definedMetrics are the specstar_ metric names the Go sources give as
// string literals (the Name of every CounterOpts, GaugeOpts ... outside
// tests).
func definedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	err := filepath.WalkDir(repoRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != repoRoot && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		for _, m := range definedMetric.FindAllStringSubmatch(mustRead(t, p), -1) {
			names[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// TestMonitoringReferencesExistingMetrics: every specstar_ metric the
// Grafana dashboard and the alert rules query is one the replicator or
// the writer defines (a histogram's _bucket, _sum and _count included),
// the rules cover lag, dead letters, stalled consumers and not-ready pods,
// and the PrometheusRule holds exactly the plain rules file's groups.
func TestMonitoringReferencesExistingMetrics(t *testing.T) {
	defined := definedMetrics(t)
	if len(defined) < 10 {
		t.Fatalf("found only %d metric names in the Go sources: %v", len(defined), defined)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal([]byte(mustRead(t, "monitoring/dashboard.json")), &dash); err != nil {
		t.Fatalf("monitoring/dashboard.json: %v", err)
	}
	var exprs []string
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("dashboard panel %q queries nothing", p.Title)
		}
		for _, q := range p.Targets {
			exprs = append(exprs, q.Expr)
		}
	}

	type rule struct {
		Alert       string            `json:"alert"`
		Expr        string            `json:"expr"`
		For         string            `json:"for,omitempty"`
		Labels      map[string]string `json:"labels,omitempty"`
		Annotations map[string]string `json:"annotations,omitempty"`
	}
	type groups struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []rule `json:"rules"`
		} `json:"groups"`
	}
	var plain groups
	if err := yaml.UnmarshalStrict([]byte(mustRead(t, "monitoring/rules.yaml")), &plain); err != nil {
		t.Fatalf("monitoring/rules.yaml: %v", err)
	}
	var operator struct {
		APIVersion string         `json:"apiVersion"`
		Kind       string         `json:"kind"`
		Metadata   map[string]any `json:"metadata"`
		Spec       groups         `json:"spec"`
	}
	if err := yaml.UnmarshalStrict([]byte(mustRead(t, "monitoring/prometheusrule.yaml")), &operator); err != nil {
		t.Fatalf("monitoring/prometheusrule.yaml: %v", err)
	}
	if operator.APIVersion != "monitoring.coreos.com/v1" || operator.Kind != "PrometheusRule" {
		t.Errorf("prometheusrule.yaml: %s %s, want monitoring.coreos.com/v1 PrometheusRule", operator.APIVersion, operator.Kind)
	}
	if !reflect.DeepEqual(operator.Spec, plain) {
		t.Errorf("prometheusrule.yaml's groups differ from rules.yaml's")
	}
	var alerts []string
	for _, g := range plain.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			exprs = append(exprs, r.Expr)
		}
	}
	sort.Strings(alerts)
	for _, want := range []string{"SpecstarSinkLagging", "SpecstarSinkDeadLetters", "SpecstarSinkStalled", "SpecstarNotReady"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("rules.yaml: no alert %s (have %v)", want, alerts)
		}
	}

	used := 0
	for _, e := range exprs {
		for _, name := range metricName.FindAllString(e, -1) {
			used++
			base := name
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if b, ok := strings.CutSuffix(name, suffix); ok && defined[b] {
					base = b
				}
			}
			if !defined[base] {
				t.Errorf("%q queries %s, which no Go source defines", e, name)
			}
		}
	}
	if used == 0 {
		t.Error("the dashboard and rules query no specstar_ metric")
	}
}
