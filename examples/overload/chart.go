package main

import (
	"fmt"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/loadshed/loadshed/shed"
)

// Colours by priority index (test-mode, sheddable, default, critical, then
// all together), and for the capacity line.
var (
	priorityColors = [shed.NumPriorities + 1]color.Color{
		color.RGBA{R: 0x99, G: 0x99, B: 0x99, A: 0xff},
		color.RGBA{R: 0x4c, G: 0x9b, B: 0xd6, A: 0xff},
		color.RGBA{R: 0xf0, G: 0xa0, B: 0x30, A: 0xff},
		color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
		color.RGBA{R: 0x33, G: 0x33, B: 0x33, A: 0xff},
	}
	capacityColor = color.RGBA{R: 0x22, G: 0x88, B: 0x22, A: 0xff}
)

// chart draws goodput by priority against offered load, one panel per
// set-up, side by side on one scale, to overload.svg and overload.png in
// dir.
func (r *report) chart(dir, caption string) error {
	if len(r.steps) == 0 {
		return nil
	}
	ymax := r.capacity
	for _, s := range r.steps {
		ymax = max(ymax, s.stats[shed.NumPriorities].goodput)
	}
	var ticks []plot.Tick
	for _, m := range r.opts.steps {
		ticks = append(ticks, plot.Tick{Value: m, Label: strconv.FormatFloat(m, 'g', -1, 64) + "×"})
	}
	xmin, xmax := r.opts.steps[0], r.opts.steps[len(r.opts.steps)-1]

	var row []*plot.Plot
	for n, setup := range r.opts.setups {
		p := plot.New()
		p.Title.Text = r.setupTitle(setup)
		p.X.Label.Text = "offered load (× capacity)"
		if n == 0 {
			p.Y.Label.Text = "goodput (successes/s)"
		}
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.ConstantTicks(ticks)
		p.X.Min, p.X.Max = xmin/1.15, xmax*1.15
		p.Y.Min, p.Y.Max = 0, ymax*1.45 // room for the legend above the lines
		p.Add(plotter.NewGrid())

		capLine, err := plotter.NewLine(plotter.XYs{{X: p.X.Min, Y: r.capacity}, {X: p.X.Max, Y: r.capacity}})
		if err != nil {
			return err
		}
		capLine.Color = capacityColor
		capLine.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(capLine)
		if n == 0 {
			p.Legend.Add(fmt.Sprintf("capacity %.0f/s", r.capacity), capLine)
		}

		for i := shed.NumPriorities; i >= 0; i-- {
			var xys plotter.XYs
			for _, s := range r.steps {
				if s.setup == setup {
					xys = append(xys, plotter.XY{X: s.mult, Y: s.stats[i].goodput})
				}
			}
			if len(xys) == 0 {
				continue
			}
			line, points, err := plotter.NewLinePoints(xys)
			if err != nil {
				return err
			}
			name, width := "all", vg.Points(2.5)
			if i < shed.NumPriorities {
				name, width = shed.Priorities()[i].String(), vg.Points(1.5)
			}
			line.Color, line.Width = priorityColors[i], width
			points.Color, points.Shape = priorityColors[i], draw.CircleGlyph{}
			p.Add(line, points)
			if n == 0 {
				p.Legend.Add(name, line, points)
			}
		}
		p.Legend.Top = true
		p.Legend.Left = true
		p.Legend.TextStyle.Font.Size = vg.Points(9)
		p.Legend.XOffs = vg.Points(4)
		row = append(row, p)
	}

	w, h := vg.Points(float64(330*len(row))), vg.Points(300)
	tiles := draw.Tiles{Rows: 1, Cols: len(row), PadX: vg.Points(12), PadTop: vg.Points(6), PadBottom: vg.Points(18), PadLeft: vg.Points(6), PadRight: vg.Points(6)}
	drawAll := func(c vg.CanvasSizer) {
		dc := draw.New(c)
		canvases := plot.Align([][]*plot.Plot{row}, tiles, dc)
		for j, p := range row {
			p.Draw(canvases[0][j])
		}
		dc.FillText(text.Style{Color: color.Gray{Y: 0x55}, Font: font.From(plot.DefaultFont, 8), Handler: plot.DefaultTextHandler, XAlign: draw.XLeft},
			vg.Point{X: vg.Points(6), Y: vg.Points(4)}, caption)
	}

	svg := vgsvg.New(w, h)
	drawAll(svg)
	if err := writeTo(filepath.Join(dir, "overload.svg"), svg); err != nil {
		return err
	}
	img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(144))
	drawAll(img)
	return writeTo(filepath.Join(dir, "overload.png"), vgimg.PngCanvas{Canvas: img})
}

func writeTo(path string, c interface {
	WriteTo(w io.Writer) (int64, error)
}) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}
