package bench

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// WritePlots draws, for each workload of results (the machine's limits
// aside), operations per second against clients with every system as one
// line on log-log axes, and writes it as PNG to prefix-<workload>.png. It
// returns the files written, by workload. Workloads measured at a single
// client count are drawn as points.
func WritePlots(prefix string, results []Result) (map[string]string, error) {
	c := compare(results, "")
	files := map[string]string{}
	for _, wl := range c.workloads {
		p, err := throughputPlot(c, wl)
		if err != nil {
			return nil, fmt.Errorf("plot of %s: %w", wl, err)
		}
		name := prefix + "-" + wl + ".png"
		if err := p.Save(7*vg.Inch, 4.5*vg.Inch, name); err != nil {
			return nil, fmt.Errorf("plot of %s: %w", wl, err)
		}
		files[wl] = name
	}
	return files, nil
}

func throughputPlot(c comparison, wl string) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = wl + ": throughput by clients (log-log)"
	p.X.Label.Text = "clients"
	p.Y.Label.Text = "operations per second"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.Legend.Top, p.Legend.Left = true, true
	// With no base, every system is a peer, in order of appearance.
	systems := c.peersOf[wl]
	var clients []int
	series := map[string]plotter.XYs{}
	for _, k := range c.cells {
		if k.workload != wl {
			continue
		}
		clients = append(clients, k.clients)
		for _, sys := range systems {
			if r, ok := c.by[k][sys]; ok && r.OpsPerS > 0 { // no point on a log scale
				series[sys] = append(series[sys], plotter.XY{X: float64(k.clients), Y: r.OpsPerS})
			}
		}
	}
	systems = slices.DeleteFunc(slices.Clone(systems), func(s string) bool { return len(series[s]) == 0 })
	if len(systems) == 0 {
		return nil, fmt.Errorf("no system did anything")
	}
	slices.Sort(clients)
	p.X.Tick.Marker = clientTicks(clients)
	p.Y.Tick.Marker = logTicks{}
	// Margins keep the extreme points off the frame, and the room above
	// the highest point keeps the lines clear of the legend.
	p.X.Min, p.X.Max = float64(clients[0])/1.3, float64(clients[len(clients)-1])*1.3
	lo, hi := math.Inf(1), 0.0
	for _, xys := range series {
		for _, xy := range xys {
			lo, hi = min(lo, xy.Y), max(hi, xy.Y)
		}
	}
	decades := max(math.Log10(hi/lo), math.Log10(2))
	p.Y.Min, p.Y.Max = lo/1.3, hi*1.3*math.Pow(10, 0.3*float64(len(systems))/3*decades)
	for i, sys := range systems {
		xys := series[sys]
		slices.SortFunc(xys, func(a, b plotter.XY) int { return int(a.X - b.X) })
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, err
		}
		line.Color, points.Color = plotutil.Color(i), plotutil.Color(i)
		line.Dashes = plotutil.Dashes(i / 7)
		points.Shape = plotutil.Shape(i)
		p.Add(line, points)
		p.Legend.Add(sys, line, points)
	}
	return p, nil
}

// clientTicks labels the client counts measured.
func clientTicks(clients []int) plot.ConstantTicks {
	var ticks plot.ConstantTicks
	for _, n := range slices.Compact(clients) {
		ticks = append(ticks, plot.Tick{Value: float64(n), Label: strconv.Itoa(n)})
	}
	return ticks
}

// logTicks labels 1, 2 and 5 times each power of ten in the range, so that
// a range within one decade still gets labels.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, e)
			if v >= lo && v <= hi {
				ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
			}
		}
	}
	return ticks
}
