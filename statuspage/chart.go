package statuspage

import (
	"html/template"
	"strconv"

	"github.com/loadshed/loadshed/shed/shedstatus"
)

// series is one line of a chart. Colours are SVG attributes rather than
// style, which the page's content security policy forbids; key names the
// style sheet's class of the same colour, for the caption.
type series struct {
	label  string
	stroke string
	key    string
	dashed bool
	value  func(shedstatus.Point) float64
}

var (
	inFlightLine = series{label: "in flight", stroke: "#2e6fdb", key: "k-in", value: func(p shedstatus.Point) float64 { return p.InFlight }}
	limitLine    = series{label: "limit", stroke: "#98a2b3", key: "k-lim", dashed: true, value: func(p shedstatus.Point) float64 { return p.Limit }}
	queuedLine   = series{label: "queued", stroke: "#b54708", key: "k-q", value: func(p shedstatus.Point) float64 { return p.Queued }}
	admittedLine = series{label: "admitted/s", stroke: "#1a7f37", key: "k-ad", value: func(p shedstatus.Point) float64 { return p.Admitted }}
	shedLine     = series{label: "shed/s", stroke: "#c01048", key: "k-sh", value: func(p shedstatus.Point) float64 { return p.Shed }}
	levelLine    = series{label: "shed level", stroke: "#b54708", key: "k-q", value: func(p shedstatus.Point) float64 { return p.ShedLevel }}
)

const chartW, chartH = 200, 56

// chart draws series over [start, end] (Unix milliseconds) as an inline
// SVG line chart, scaled to the largest value. It is built from numbers
// and the fixed labels above only, so it needs no escaping.
func chart(title string, pts []shedstatus.Point, start, end int64, ss []series) template.HTML {
	top := 0.0
	for _, p := range pts {
		for _, s := range ss {
			top = max(top, s.value(p))
		}
	}
	if top <= 0 {
		top = 1
	}
	b := make([]byte, 0, 512+len(ss)*len(pts)*12)
	b = append(b, `<figure><figcaption>`...)
	b = append(b, title...)
	b = append(b, ` · max `...)
	b = append(b, num(float64(int64(top*100+0.5))/100)...)
	b = append(b, `<span class="key">`...)
	for _, s := range ss {
		b = append(b, `<i class="`...)
		b = append(b, s.key...)
		b = append(b, `"></i>`...)
		b = append(b, s.label...)
	}
	b = append(b, `</span></figcaption><svg class="chart" width="200" height="56" viewBox="0 0 200 56" role="img" aria-label="`...)
	b = append(b, title...)
	b = append(b, `">`...)
	dx := float64(chartW) / float64(max(end-start, 1))
	for _, s := range ss {
		b = append(b, `<polyline fill="none" stroke-width="1.5" stroke="`...)
		b = append(b, s.stroke...)
		b = append(b, '"')
		if s.dashed {
			b = append(b, ` stroke-dasharray="4 3"`...)
		}
		b = append(b, ` points="`...)
		sep := false
		for _, p := range pts {
			if p.Time < start {
				continue
			}
			if sep {
				b = append(b, ' ')
			}
			sep = true
			b = strconv.AppendFloat(b, float64(p.Time-start)*dx, 'f', 1, 64)
			b = append(b, ',')
			b = strconv.AppendFloat(b, float64(chartH-2)-s.value(p)/top*float64(chartH-4), 'f', 1, 64)
		}
		b = append(b, `"/>`...)
	}
	b = append(b, `</svg></figure>`...)
	return template.HTML(b)
}
