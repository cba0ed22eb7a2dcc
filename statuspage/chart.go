package statuspage

import (
	"html/template"
	"strconv"
	"strings"

	"github.com/loadshed/loadshed/shed/shedstatus"
)

// series is one line of a chart.
type series struct {
	label  string
	color  string
	dashed bool
	value  func(shedstatus.Point) float64
}

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
	var b strings.Builder
	b.Grow(256 + len(ss)*len(pts)*12)
	b.WriteString(`<figure><figcaption>`)
	b.WriteString(title)
	b.WriteString(` · max `)
	b.WriteString(num(round2(top)))
	b.WriteString(`<span class="key">`)
	for _, s := range ss {
		b.WriteString(`<i class="`)
		b.WriteString(keyClass(s.color))
		b.WriteString(`"></i>`)
		b.WriteString(s.label)
	}
	b.WriteString(`</span></figcaption><svg class="chart" width="` + strconv.Itoa(chartW) + `" height="` + strconv.Itoa(chartH) +
		`" viewBox="0 0 ` + strconv.Itoa(chartW) + ` ` + strconv.Itoa(chartH) + `" role="img" aria-label="`)
	b.WriteString(title)
	b.WriteString(`">`)
	dx := float64(chartW) / float64(max(end-start, 1))
	for _, s := range ss {
		b.WriteString(`<polyline fill="none" stroke-width="1.5" stroke="`)
		b.WriteString(strokeOf(s.color))
		b.WriteString(`"`)
		if s.dashed {
			b.WriteString(` stroke-dasharray="4 3"`)
		}
		b.WriteString(` points="`)
		for i, p := range pts {
			if p.Time < start {
				continue
			}
			if i > 0 {
				b.WriteByte(' ')
			}
			x := float64(p.Time-start) * dx
			y := float64(chartH-2) - s.value(p)/top*float64(chartH-4)
			b.WriteString(strconv.FormatFloat(x, 'f', 1, 64))
			b.WriteByte(',')
			b.WriteString(strconv.FormatFloat(y, 'f', 1, 64))
		}
		b.WriteString(`"/>`)
	}
	b.WriteString(`</svg></figure>`)
	return template.HTML(b.String())
}

func round2(v float64) float64 {
	return float64(int64(v*100+0.5)) / 100
}

// Colours are written as attributes, not style, which the page's content
// security policy forbids; these match the style sheet's variables.
var strokes = map[string]string{
	"var(--in)": "#2e6fdb", "var(--lim)": "#98a2b3", "var(--q)": "#b54708",
	"var(--ok)": "#1a7f37", "var(--bad)": "#c01048",
}

var keys = map[string]string{
	"var(--in)": "k-in", "var(--lim)": "k-lim", "var(--q)": "k-q",
	"var(--ok)": "k-ad", "var(--bad)": "k-sh",
}

func strokeOf(c string) string { return strokes[c] }
func keyClass(c string) string { return keys[c] }
