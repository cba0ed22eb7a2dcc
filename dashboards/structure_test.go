package dashboards_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/loadshed/loadshed/internal/telemetry"
)

var update = flag.Bool("update", false, "rewrite the dashboards' JSON from spec_test.go")

func TestDashboardsUpToDate(t *testing.T) {
	for _, b := range boards {
		want := b.render()
		if *update {
			if err := os.WriteFile(b.file, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(b.file)
		if err != nil {
			t.Fatalf("%v (go test ./dashboards -run TestDashboardsUpToDate -update writes it)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from what spec_test.go renders: edit the spec and run go test ./dashboards -run TestDashboardsUpToDate -update", b.file)
		}
	}
}

// dashboard is what the checks read of a dashboard file.
type dashboard struct {
	UID           string `json:"uid"`
	Title         string `json:"title"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name    string          `json:"name"`
			Type    string          `json:"type"`
			Query   json.RawMessage `json:"query"`
			Current struct {
				Value any `json:"value"`
			} `json:"current"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID         int    `json:"id"`
		Type       string `json:"type"`
		Title      string `json:"title"`
		Datasource struct {
			Type string `json:"type"`
			UID  string `json:"uid"`
		} `json:"datasource"`
		GridPos struct {
			X, Y, W, H int
		} `json:"gridPos"`
		FieldConfig struct {
			Defaults struct {
				Unit       string `json:"unit"`
				Thresholds struct {
					Mode  string `json:"mode"`
					Steps []struct {
						Color string   `json:"color"`
						Value *float64 `json:"value"`
					} `json:"steps"`
				} `json:"thresholds"`
			} `json:"defaults"`
		} `json:"fieldConfig"`
		Targets []struct {
			RefID        string `json:"refId"`
			Expr         string `json:"expr"`
			LegendFormat string `json:"legendFormat"`
		} `json:"targets"`
	} `json:"panels"`
}

func readDashboards(t *testing.T) map[string]dashboard {
	t.Helper()
	files, err := filepath.Glob("*.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no dashboards")
	}
	out := map[string]dashboard{}
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var d dashboard
		dec := json.NewDecoder(bytes.NewReader(raw))
		if err := dec.Decode(&d); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		out[file] = d
	}
	return out
}

var panelTypes = map[string]bool{"timeseries": true, "stat": true, "gauge": true, "bargauge": true, "table": true, "text": true}

// metricRef finds the metric names a PromQL expression names: every one of
// ours starts with loadshed_.
var metricRef = regexp.MustCompile(`\bloadshed_[a-z_]+\b`)

// exported returns every series name the adapters export: the catalog's
// names, with a histogram's _bucket, _sum and _count.
func exported() map[string]bool {
	names := map[string]bool{}
	for _, m := range append(append([]telemetry.Metric{}, telemetry.Events...), telemetry.Gauges...) {
		if m.Kind == telemetry.Histogram {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[m.Prom+s] = true
			}
			continue
		}
		names[m.Prom] = true
	}
	return names
}

func TestDashboardStructure(t *testing.T) {
	ds := readDashboards(t)
	names := exported()
	uids := map[string]string{}
	for file, d := range ds {
		if d.UID == "" || d.Title == "" {
			t.Errorf("%s: uid and title are required", file)
		}
		if other, dup := uids[d.UID]; dup {
			t.Errorf("%s: uid %q is %s's too", file, d.UID, other)
		}
		uids[d.UID] = file
		if d.SchemaVersion != schemaVersion {
			t.Errorf("%s: schemaVersion %d, want %d", file, d.SchemaVersion, schemaVersion)
		}
		vars := map[string]bool{}
		for _, v := range d.Templating.List {
			vars[v.Name] = true
		}
		for _, v := range []string{"datasource", "job", "instance"} {
			if !vars[v] {
				t.Errorf("%s: no %q variable", file, v)
			}
		}
		if len(d.Panels) == 0 {
			t.Errorf("%s: no panels", file)
		}
		ids := map[int]bool{}
		for _, p := range d.Panels {
			where := file + ": panel " + strings.TrimSpace(p.Title)
			if p.ID == 0 || ids[p.ID] {
				t.Errorf("%s: id %d is missing or not unique", where, p.ID)
			}
			ids[p.ID] = true
			if !panelTypes[p.Type] {
				t.Errorf("%s: type %q is not a known panel type", where, p.Type)
			}
			if p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" {
				t.Errorf("%s: datasource %+v, want the prometheus ${datasource} variable", where, p.Datasource)
			}
			if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
				t.Errorf("%s: gridPos %+v does not fit the 24-column grid", where, p.GridPos)
			}
			if p.FieldConfig.Defaults.Unit == "" {
				t.Errorf("%s: no unit", where)
			}
			if steps := p.FieldConfig.Defaults.Thresholds.Steps; len(steps) == 0 || steps[0].Value != nil {
				t.Errorf("%s: thresholds must start with a base step", where)
			}
			if len(p.Targets) == 0 {
				t.Errorf("%s: no targets", where)
			}
			for _, tg := range p.Targets {
				if tg.RefID == "" || strings.TrimSpace(tg.Expr) == "" {
					t.Errorf("%s: a target without refId or expr", where)
				}
				for _, v := range regexp.MustCompile(`\$(\w+)`).FindAllStringSubmatch(tg.Expr, -1) {
					if !vars[v[1]] && !strings.HasPrefix(v[1], "__") {
						t.Errorf("%s: %s uses $%s, which the dashboard does not define", where, tg.RefID, v[1])
					}
				}
				for _, m := range metricRef.FindAllString(tg.Expr, -1) {
					if !names[m] {
						t.Errorf("%s: %s names %s, which the adapters do not export", where, tg.RefID, m)
					}
				}
			}
		}
	}
	checkProvisioning(t, ds)
}

// checkProvisioning reads the provisioning file line by line (it is a few
// lines of YAML): a file provider whose path is the folder docs/observability.md tells
// Grafana to mount these dashboards at.
func checkProvisioning(t *testing.T, ds map[string]dashboard) {
	raw, err := os.ReadFile("provisioning/dashboards.yaml")
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]string{}
	for _, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimPrefix(strings.TrimSpace(line), "- ")
		if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(k, "#") {
			fields[strings.TrimSpace(k)] = strings.Trim(strings.TrimSpace(v), `"'`)
		}
	}
	if fields["apiVersion"] != "1" || fields["type"] != "file" {
		t.Errorf("provisioning: want apiVersion 1 and a provider of type file, got %v", fields)
	}
	const mounted = "/var/lib/grafana/dashboards/loadshed"
	if fields["path"] != mounted {
		t.Errorf("provisioning: path %q, want %q (where docs/observability.md mounts dashboards/)", fields["path"], mounted)
	}
	readme, err := os.ReadFile("../docs/observability.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "dashboards:"+mounted) {
		t.Errorf("docs/observability.md does not mount dashboards/ at %s", mounted)
	}
	var files []string
	for f := range ds {
		files = append(files, f)
	}
	sort.Strings(files)
	if len(files) != len(boards) {
		t.Errorf("the folder holds %v; the spec renders %d dashboards", files, len(boards))
	}
}
