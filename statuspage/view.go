package statuspage

import (
	"html/template"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/loadshed/loadshed/shed/layerkit"
	"github.com/loadshed/loadshed/shed/shedstatus"
)

// view is what the template shows: the snapshot, with each layer's
// readings picked out.
type view struct {
	Title   string
	CSS     template.CSS
	JS      template.JS
	S       shedstatus.Snapshot
	Layers  []layerView
	EveryMS int64
	Every   string
	Span    string
}

type layerView struct {
	shedstatus.Layer
	InFlight, Limit, Queued, ShedLevel, Headroom, Instances float64
	HasInFlight, HasLimit, HasQueued, HasShedLevel          bool
	HasHeadroom, HasInstances, HasFallback, Fallback        bool
	Shedding                                                bool
	Admitted, Shed                                          float64
	Signals                                                 []shedstatus.Reading
	PerPriority                                             bool
	PerPriorityNames                                        []string
	Rows                                                    []row
	Charts                                                  []template.HTML
}

type row struct {
	shedstatus.PriorityRates
	Extra []string
}

func (h *Handler) view() *view {
	s := h.rec.Snapshot(time.Time{})
	every := time.Duration(s.EverySeconds * float64(time.Second))
	v := &view{Title: h.title, CSS: template.CSS(pageCSS), JS: template.JS(pageJS), S: s,
		EveryMS: max(every.Milliseconds(), 250), Every: every.String(), Span: "5m"}
	var span time.Duration
	for i := range s.Layers {
		if n := len(s.Layers[i].History); n > 1 {
			span = max(span, time.Duration(s.Layers[i].History[n-1].Time-s.Layers[i].History[0].Time)*time.Millisecond)
		}
	}
	if span > 0 {
		v.Span = span.Round(time.Second).String()
	}
	for _, l := range s.Layers {
		v.Layers = append(v.Layers, layerOf(l, s.Time))
	}
	return v
}

func layerOf(l shedstatus.Layer, now time.Time) layerView {
	lv := layerView{Layer: l}
	perPriority := map[string]map[string]float64{} // gauge name → priority → value
	for _, g := range l.Gauges {
		switch {
		case g.Signal != "" && g.Name == layerkit.GaugeUtilization:
			lv.Signals = append(lv.Signals, g)
			continue
		case g.Priority != "":
			if perPriority[g.Name] == nil {
				perPriority[g.Name] = map[string]float64{}
				lv.PerPriorityNames = append(lv.PerPriorityNames, strings.ReplaceAll(g.Name, "_", " "))
			}
			perPriority[g.Name][g.Priority] = g.Value
			continue
		}
		switch g.Name {
		case layerkit.GaugeInFlight:
			lv.InFlight, lv.HasInFlight = g.Value, true
		case layerkit.GaugeLimit:
			lv.Limit, lv.HasLimit = g.Value, g.Value > 0
		case layerkit.GaugeQueued:
			lv.Queued, lv.HasQueued = g.Value, true
		case layerkit.GaugeShedLevel:
			lv.ShedLevel, lv.HasShedLevel = g.Value, true
			lv.Shedding = g.Value > 0
		case layerkit.GaugeHeadroom:
			lv.Headroom, lv.HasHeadroom = g.Value, true
		case layerkit.GaugeInstances:
			lv.Instances, lv.HasInstances = g.Value, true
		case layerkit.GaugeFallback:
			lv.HasFallback, lv.Fallback = true, g.Value > 0
		}
	}
	lv.PerPriority = len(lv.PerPriorityNames) > 0
	names := make([]string, 0, len(perPriority))
	for _, n := range lv.PerPriorityNames {
		names = append(names, strings.ReplaceAll(n, " ", "_"))
	}
	// Highest priority first: what an operator looks for first.
	for i := len(l.Priorities) - 1; i >= 0; i-- {
		p := l.Priorities[i]
		lv.Admitted += p.Admitted
		lv.Shed += p.Shed
		r := row{PriorityRates: p}
		for _, n := range names {
			if v, ok := perPriority[n][p.Priority]; ok {
				r.Extra = append(r.Extra, num(v))
			} else {
				r.Extra = append(r.Extra, "")
			}
		}
		lv.Rows = append(lv.Rows, r)
	}
	end := now.UnixMilli()
	start := end - (5 * time.Minute).Milliseconds()
	if lv.HasInFlight || lv.HasQueued {
		var ss []series
		if lv.HasLimit {
			ss = append(ss, limitLine)
		}
		if lv.HasInFlight {
			ss = append(ss, inFlightLine)
		}
		if lv.HasQueued {
			ss = append(ss, queuedLine)
		}
		lv.Charts = append(lv.Charts, chart("in flight", l.History, start, end, ss))
	}
	lv.Charts = append(lv.Charts, chart("decisions/s", l.History, start, end, []series{admittedLine, shedLine}))
	if lv.HasShedLevel {
		lv.Charts = append(lv.Charts, chart("shed level", l.History, start, end, []series{levelLine}))
	}
	return lv
}

// num prints a figure: whole numbers as such, others with two decimals at most.
func num(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// rate prints a rate per second.
func rate(v float64) string {
	if v >= 100 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

// pct prints a fraction as a percentage.
func pct(v float64) string { return strconv.FormatFloat(v*100, 'f', 1, 64) + "%" }
