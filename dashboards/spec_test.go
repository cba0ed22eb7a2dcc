package dashboards_test

// The dashboards are written here, as data, and rendered to the JSON files
// beside this one:
//
//	go test ./dashboards -run TestDashboardsUpToDate -update
//
// TestDashboardsUpToDate fails when a file differs from what this spec
// renders; TestDashboardStructure checks the files themselves, and
// TestDashboardsAgainstPrometheus runs every query against a real Prometheus
// that scraped a server driven through every kind of decision.

import (
	"encoding/json"
	"fmt"
	"strings"
)

// schemaVersion is the newest classic dashboard schema in Grafana's source
// (apps/dashboard/pkg/migration/schemaversion: V43). Its last migrations
// (hideFrom overrides, formatTime transformations) touch nothing these
// dashboards use, so older Grafanas read them as they are.
const schemaVersion = 43

type board struct {
	file, uid, title, description string
	// layer is the default of the layer variable; "" for no variable.
	layer  string
	panels []panel
}

type panel struct {
	title, description string
	kind               string // timeseries (default), stat, gauge, bargauge
	unit               string
	min, max           *float64
	// thresholds: the steps above the base (green), as value: color.
	thresholds []step
	targets    []target
	w, h       int // default 12 x 8
}

type step struct {
	value float64
	color string
}

type target struct {
	expr, legend string
}

func f(v float64) *float64 { return &v }

// sel is the selector every query starts from, with extra matchers.
func sel(extra ...string) string {
	m := append([]string{`job=~"$job"`, `instance=~"$instance"`}, extra...)
	return "{" + strings.Join(m, ",") + "}"
}

// lsel is sel restricted to the board's layer variable.
func lsel(extra ...string) string { return sel(append([]string{`layer=~"$layer"`}, extra...)...) }

func rate(metric, selector string) string {
	return fmt.Sprintf("rate(%s%s[$__rate_interval])", metric, selector)
}

const (
	requests    = "loadshed_requests_total"
	queueBucket = "loadshed_request_time_in_queue_seconds_bucket"
	leaseBucket = "loadshed_request_lease_duration_seconds_bucket"
	leaseCount  = "loadshed_request_lease_duration_seconds_count"
)

func quantiles(bucket, selector, by string) []target {
	q := func(q string) string {
		return fmt.Sprintf("histogram_quantile(%s, sum by (le, %s) (%s))", q, by, rate(bucket, selector))
	}
	return []target{{q("0.5"), "p50 {{" + by + "}}"}, {q("0.99"), "p99 {{" + by + "}}"}}
}

var shedRatioSteps = []step{{0.01, "yellow"}, {0.1, "red"}}

var boards = []board{
	{
		file: "overview.json", uid: "loadshed-overview", title: "loadshed / overview",
		description: "What every layer admitted and shed, by priority; goodput; which policies fire.",
		panels: []panel{
			{title: "Shed now", kind: "stat", unit: "reqps", w: 6, h: 4, thresholds: []step{{0.001, "red"}},
				description: "Requests rejected by any layer, per second.",
				targets:     []target{{fmt.Sprintf("sum(%s)", rate(requests, sel(`result="rejected"`))), "shed"}}},
			{title: "Shed fraction", kind: "stat", unit: "percentunit", w: 6, h: 4, min: f(0), max: f(1), thresholds: shedRatioSteps,
				description: "Rejected requests over requests offered (the first layer sees every request).",
				targets: []target{{fmt.Sprintf("sum(%s) / max(sum by (layer) (%s))",
					rate(requests, sel(`result="rejected"`)), rate(requests, sel())), "shed"}}},
			{title: "Dry run: would reject", kind: "stat", unit: "reqps", w: 6, h: 4, thresholds: []step{{0.001, "yellow"}},
				description: "Requests a layer in dry run admitted but would have rejected.",
				targets:     []target{{fmt.Sprintf("sum(%s)", rate(requests, sel(`result="would_reject"`))), "would reject"}}},
			{title: "Decided from a fallback", kind: "stat", unit: "reqps", w: 6, h: 4, thresholds: []step{{0.001, "orange"}},
				description: "Decisions taken from a local estimate because the shared store (Redis) did not answer.",
				targets:     []target{{fmt.Sprintf("sum(%s)", rate(requests, sel(`fallback="true"`))), "fallback"}}},
			{title: "Admitted by layer", unit: "reqps", min: f(0),
				targets: []target{{fmt.Sprintf("sum by (layer) (%s)", rate(requests, sel(`result=~"admitted|would_reject"`))), "{{layer}}"}}},
			{title: "Shed by layer and priority", unit: "reqps", min: f(0),
				description: "Rejections: 429 for a client over its own limit, 503 for capacity.",
				targets:     []target{{fmt.Sprintf("sum by (layer, priority, status) (%s)", rate(requests, sel(`result="rejected"`))), "{{layer}} {{priority}} {{status}}"}}},
			{title: "Goodput by priority", unit: "reqps", min: f(0),
				description: "Requests whose work completed, by priority (every layer releases one lease per request; the busiest layer counts them).",
				targets:     []target{{fmt.Sprintf("max by (priority) (sum by (layer, priority) (%s))", rate(leaseCount, sel(`outcome="completed"`))), "{{priority}}"}}},
			{title: "Shed fraction by priority", unit: "percentunit", min: f(0), max: f(1), thresholds: shedRatioSteps,
				description: "Lower priorities should be shed first: critical stays near zero while sheddable rises.",
				targets: []target{{fmt.Sprintf("sum by (priority) (%s) / max by (priority) (sum by (layer, priority) (%s))",
					rate(requests, sel(`result="rejected"`)), rate(requests, sel())), "{{priority}}"}}},
			{title: "Policies that fire", unit: "reqps", min: f(0),
				description: "Rejections and dry-run would-rejects by the limit that decided.",
				targets:     []target{{fmt.Sprintf("sum by (layer, policy, result) (%s)", rate(requests, sel(`result=~"rejected|would_reject"`))), "{{layer}} {{policy}} {{result}}"}}},
			{title: "Leases held by layer", unit: "short", min: f(0),
				description: "Requests admitted and not yet finished, per layer.",
				targets:     []target{{fmt.Sprintf("sum by (layer) (loadshed_active_request_leases%s)", sel()), "{{layer}}"}}},
			{title: "Canceled while waiting", unit: "reqps", min: f(0),
				description: "Callers that went away while a layer queued them.",
				targets:     []target{{fmt.Sprintf("sum by (layer, priority) (%s)", rate(requests, sel(`result="canceled"`))), "{{layer}} {{priority}}"}}},
			{title: "Queue wait", unit: "s", min: f(0), thresholds: []step{{0.1, "yellow"}, {1, "red"}},
				targets: quantiles(queueBucket, sel(), "layer")},
		},
	},
	{
		file: "ratelimit.json", uid: "loadshed-ratelimit", title: "loadshed / request rate", layer: "ratelimit",
		description: "The request-rate layer: which policies reject (429), run over in soft mode, or would reject in dry run.",
		panels: []panel{
			{title: "Decisions by result", unit: "reqps", min: f(0),
				targets: []target{{fmt.Sprintf("sum by (result) (%s)", rate(requests, lsel())), "{{result}}"}}},
			{title: "Rejected fraction", kind: "gauge", unit: "percentunit", min: f(0), max: f(1), thresholds: shedRatioSteps,
				targets: []target{{fmt.Sprintf("sum(%s) / sum(%s)", rate(requests, lsel(`result="rejected"`)), rate(requests, lsel())), "rejected"}}},
			{title: "Rejections by policy", unit: "reqps", min: f(0),
				description: "Which limit fired: the rule name.",
				targets:     []target{{fmt.Sprintf("sum by (policy, priority) (%s)", rate(requests, lsel(`result="rejected"`))), "{{policy}} {{priority}}"}}},
			{title: "Over the limit (soft, elastic)", unit: "reqps", min: f(0),
				description: "Requests admitted above a policy's limit by a soft or elastic allowance: the policies nearest their limits.",
				targets:     []target{{fmt.Sprintf("sum by (policy) (%s)", rate(requests, lsel(`over="true"`))), "{{policy}}"}}},
			{title: "Dry run: would reject, by policy", unit: "reqps", min: f(0),
				targets: []target{{fmt.Sprintf("sum by (layer, policy) (%s)", rate(requests, lsel(`result="would_reject"`))), "{{layer}} {{policy}}"}}},
			{title: "Queue wait", unit: "s", min: f(0), thresholds: []step{{0.1, "yellow"}, {1, "red"}},
				targets: quantiles(queueBucket, lsel(), "layer")},
		},
	},
	{
		file: "concurrency.json", uid: "loadshed-concurrency", title: "loadshed / concurrency", layer: "concurrency",
		description: "The concurrent-request layer: requests in flight against the limit (adaptive limits move), queue, rejections.",
		panels: []panel{
			{title: "In flight and limit", unit: "short", min: f(0),
				targets: []target{
					{fmt.Sprintf("sum by (layer) (loadshed_in_flight%s)", lsel()), "in flight {{layer}}"},
					{fmt.Sprintf("sum by (layer) (loadshed_limit%s)", lsel()), "limit {{layer}}"},
				}},
			{title: "Use of the limit", kind: "gauge", unit: "percentunit", min: f(0), max: f(1), thresholds: []step{{0.8, "yellow"}, {0.95, "red"}},
				targets: []target{{fmt.Sprintf("sum by (layer) (loadshed_in_flight%s) / sum by (layer) (loadshed_limit%s)", lsel(), lsel()), "{{layer}}"}}},
			{title: "Limit (adaptive)", unit: "short", min: f(0),
				description: "The limit in force; an adaptive limit moves with observed latency.",
				targets:     []target{{fmt.Sprintf("loadshed_limit%s", lsel()), "{{layer}} {{instance}}"}}},
			{title: "Leases held by priority", unit: "short", min: f(0),
				targets: []target{{fmt.Sprintf("sum by (priority) (loadshed_active_request_leases%s)", lsel()), "{{priority}}"}}},
			{title: "Queued", unit: "short", min: f(0),
				targets: []target{{fmt.Sprintf("sum by (layer) (loadshed_queued%s)", lsel()), "{{layer}}"}}},
			{title: "Rejections by policy and status", unit: "reqps", min: f(0),
				targets: []target{{fmt.Sprintf("sum by (policy, status) (%s)", rate(requests, lsel(`result="rejected"`))), "{{policy}} {{status}}"}}},
			{title: "Queue wait", unit: "s", min: f(0), thresholds: []step{{0.1, "yellow"}, {1, "red"}},
				targets: quantiles(queueBucket, lsel(), "result")},
			{title: "Lease duration", unit: "s", min: f(0),
				description: "How long admitted requests held their slot, by how the work ended.",
				targets:     quantiles(leaseBucket, lsel(), "outcome")},
		},
	},
	{
		file: "fleet.json", uid: "loadshed-fleet", title: "loadshed / fleet usage", layer: "fleet",
		description: "The fleet-usage layer: requests in flight across the fleet by priority against each priority's ceiling.",
		panels: []panel{
			{title: "Fleet usage and ceiling by priority", unit: "short", min: f(0),
				targets: []target{
					{fmt.Sprintf("max by (priority) (loadshed_usage%s)", lsel()), "usage {{priority}}"},
					{fmt.Sprintf("max by (priority) (loadshed_ceiling%s)", lsel()), "ceiling {{priority}}"},
				}},
			{title: "Usage against ceiling", kind: "bargauge", unit: "percentunit", min: f(0), max: f(1), thresholds: []step{{0.8, "yellow"}, {1, "red"}},
				targets: []target{{fmt.Sprintf("max by (priority) (loadshed_usage%s) / max by (priority) (loadshed_ceiling%s)", lsel(), lsel()), "{{priority}}"}}},
			{title: "Live instances", kind: "stat", unit: "short", w: 6, h: 8, thresholds: []step{{0, "red"}, {1, "green"}},
				targets: []target{{fmt.Sprintf("max(loadshed_instances%s)", lsel()), "instances"}}},
			{title: "Fallback", kind: "stat", unit: "bool_on_off", w: 6, h: 8, thresholds: []step{{1, "red"}},
				description: "On while the layer decides from its local share because Redis does not answer.",
				targets:     []target{{fmt.Sprintf("max(loadshed_fallback%s)", lsel()), "fallback"}}},
			{title: "Shed by priority", unit: "reqps", min: f(0),
				targets: []target{{fmt.Sprintf("sum by (priority) (%s)", rate(requests, lsel(`result="rejected"`))), "{{priority}}"}}},
		},
	},
	{
		file: "worker.json", uid: "loadshed-worker", title: "loadshed / worker utilisation", layer: "worker",
		description: "The worker-utilisation layer: CPU, scheduler latency and queue delay against their targets, the shed level, headroom.",
		panels: []panel{
			{title: "Utilisation by signal", unit: "percentunit", min: f(0), thresholds: []step{{0.8, "yellow"}, {1, "red"}},
				description: "Each signal against its target: 100% is the target.",
				targets:     []target{{fmt.Sprintf("max by (signal) (loadshed_utilization_ratio%s)", lsel()), "{{signal}}"}}},
			{title: "Shed level", unit: "short", min: f(0), thresholds: []step{{1, "yellow"}, {3, "red"}},
				targets: []target{{fmt.Sprintf("max by (instance) (loadshed_shed_level%s)", lsel()), "{{instance}}"}}},
			{title: "Shed fraction by priority", unit: "percentunit", min: f(0), max: f(1), thresholds: shedRatioSteps,
				targets: []target{{fmt.Sprintf("max by (priority) (loadshed_shed_fraction_ratio%s)", lsel()), "{{priority}}"}}},
			{title: "Headroom", kind: "gauge", unit: "percentunit", min: f(0), max: f(1), thresholds: []step{{0, "red"}, {0.2, "yellow"}, {0.4, "green"}},
				targets: []target{{fmt.Sprintf("min(loadshed_headroom_ratio%s)", lsel()), "headroom"}}},
			{title: "Queue delay", unit: "s", min: f(0), thresholds: []step{{0.1, "yellow"}, {1, "red"}},
				targets: quantiles(queueBucket, lsel(), "priority")},
			{title: "Shed by priority", unit: "reqps", min: f(0),
				targets: []target{{fmt.Sprintf("sum by (priority) (%s)", rate(requests, lsel(`result="rejected"`))), "{{priority}}"}}},
		},
	},
	{
		file: "redis.json", uid: "loadshed-redis", title: "loadshed / Redis health",
		description: "The Redis-backed layers' shared store: errors, fallback to local estimates, decisions taken from them.",
		panels: []panel{
			{title: "In fallback", kind: "stat", unit: "bool_on_off", thresholds: []step{{1, "red"}},
				description: "Layers deciding from a local estimate now, because Redis does not answer.",
				targets:     []target{{fmt.Sprintf("max by (layer) (loadshed_fallback%s)", sel()), "{{layer}}"}}},
			{title: "Store errors", unit: "ops", min: f(0), thresholds: []step{{0.001, "red"}},
				targets: []target{{fmt.Sprintf("sum by (layer) (%s)", rate("loadshed_store_errors_total", sel())), "{{layer}}"}}},
			{title: "Decisions from a fallback", unit: "reqps", min: f(0),
				targets: []target{{fmt.Sprintf("sum by (layer, result) (%s)", rate(requests, sel(`fallback="true"`))), "{{layer}} {{result}}"}}},
			{title: "Fraction decided from a fallback", unit: "percentunit", min: f(0), max: f(1), thresholds: []step{{0.01, "orange"}},
				targets: []target{{fmt.Sprintf("sum by (layer) (%s) / sum by (layer) (%s)", rate(requests, sel(`fallback="true"`)), rate(requests, sel())), "{{layer}}"}}},
		},
	},
}

const datasourceRef = "${datasource}"

func ds() map[string]any { return map[string]any{"type": "prometheus", "uid": datasourceRef} }

func variable(name, label, query string, current any, includeAll bool) map[string]any {
	v := map[string]any{
		"name": name, "label": label, "type": "query", "datasource": ds(),
		"definition": query, "query": map[string]any{"query": query, "refId": name, "qryType": 1},
		"refresh": 2, "sort": 1, "multi": true, "includeAll": includeAll, "current": current, "hide": 0,
		"options": []any{}, "regex": "",
	}
	if includeAll {
		v["allValue"] = ".*"
	}
	return v
}

var all = map[string]any{"selected": true, "text": []any{"All"}, "value": []any{"$__all"}}

// render returns b as Grafana's classic dashboard JSON.
func (b board) render() []byte {
	vars := []any{
		map[string]any{"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
			"current": map[string]any{}, "hide": 0, "refresh": 1, "regex": "", "options": []any{}},
		variable("job", "Job", "label_values(loadshed_requests_total, job)", all, true),
		variable("instance", "Instance", `label_values(loadshed_requests_total{job=~"$job"}, instance)`, all, true),
	}
	if b.layer != "" {
		vars = append(vars, variable("layer", "Layer", `label_values(loadshed_requests_total{job=~"$job",instance=~"$instance"}, layer)`,
			map[string]any{"selected": true, "text": []any{b.layer}, "value": []any{b.layer}}, true))
	}
	var panels []any
	x, y, rowH := 0, 0, 0
	for i, p := range b.panels {
		w, h := p.w, p.h
		if w == 0 {
			w = 12
		}
		if h == 0 {
			h = 8
		}
		if x+w > 24 {
			x, y, rowH = 0, y+rowH, 0
		}
		panels = append(panels, p.render(i+1, x, y, w, h))
		x += w
		rowH = max(rowH, h)
	}
	d := map[string]any{
		"uid": b.uid, "title": b.title, "description": b.description, "tags": []any{"loadshed"},
		"schemaVersion": schemaVersion, "version": 1, "editable": true, "graphTooltip": 1,
		"refresh": "30s", "time": map[string]any{"from": "now-1h", "to": "now"}, "timezone": "",
		"fiscalYearStartMonth": 0, "liveNow": false, "weekStart": "",
		"timepicker": map[string]any{}, "id": nil,
		"templating": map[string]any{"list": vars},
		"annotations": map[string]any{"list": []any{map[string]any{
			"builtIn": 1, "datasource": map[string]any{"type": "grafana", "uid": "-- Grafana --"}, "enable": true,
			"hide": true, "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts", "type": "dashboard"}}},
		"links": []any{map[string]any{"type": "dashboards", "tags": []any{"loadshed"}, "asDropdown": true,
			"title": "loadshed", "includeVars": true, "keepTime": true, "icon": "external link", "targetBlank": false,
			"tooltip": "", "url": ""}},
		"panels": panels,
	}
	out, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		panic(err)
	}
	return append(out, '\n')
}

func (p panel) render(id, x, y, w, h int) map[string]any {
	kind := p.kind
	if kind == "" {
		kind = "timeseries"
	}
	steps := []any{map[string]any{"color": "green", "value": nil}}
	for _, s := range p.thresholds {
		steps = append(steps, map[string]any{"color": s.color, "value": s.value})
	}
	defaults := map[string]any{
		"unit":       p.unit,
		"thresholds": map[string]any{"mode": "absolute", "steps": steps},
		"color":      map[string]any{"mode": "palette-classic"},
	}
	if p.min != nil {
		defaults["min"] = *p.min
	}
	if p.max != nil {
		defaults["max"] = *p.max
	}
	var options map[string]any
	switch kind {
	case "timeseries":
		mode := "off"
		if len(p.thresholds) > 0 {
			mode = "line"
		}
		defaults["custom"] = map[string]any{"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10,
			"showPoints": "never", "spanNulls": false, "thresholdsStyle": map[string]any{"mode": mode}}
		options = map[string]any{
			"legend":  map[string]any{"displayMode": "table", "placement": "bottom", "showLegend": true, "calcs": []any{"lastNotNull", "max"}},
			"tooltip": map[string]any{"mode": "multi", "sort": "desc"},
		}
	default:
		defaults["color"] = map[string]any{"mode": "thresholds"}
		options = map[string]any{
			"reduceOptions": map[string]any{"calcs": []any{"lastNotNull"}, "fields": "", "values": false},
			"orientation":   "auto",
		}
		if kind == "stat" {
			options["colorMode"], options["graphMode"], options["textMode"] = "background", "area", "auto"
		}
		if kind == "gauge" {
			options["showThresholdMarkers"], options["showThresholdLabels"] = true, false
		}
		if kind == "bargauge" {
			options["displayMode"], options["orientation"] = "gradient", "horizontal"
		}
	}
	var targets []any
	for i, t := range p.targets {
		targets = append(targets, map[string]any{
			"refId": string(rune('A' + i)), "datasource": ds(), "expr": t.expr, "legendFormat": t.legend,
			"range": true, "instant": false, "editorMode": "code",
		})
	}
	return map[string]any{
		"id": id, "type": kind, "title": p.title, "description": p.description, "datasource": ds(),
		"gridPos":     map[string]any{"x": x, "y": y, "w": w, "h": h},
		"fieldConfig": map[string]any{"defaults": defaults, "overrides": []any{}},
		"options":     options, "targets": targets,
	}
}
