package monitor

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/spooltype"
)

// The cost page: where the money went over a time range, grouped by one
// key (directive, model, tenant, tag:KEY), as a chart of spend per day
// stacked by key and the report's table (`spool cost report`).

// costData is the cost page.
type costData struct {
	By, Since, Tag string
	Report         *spooltype.CostReport
	Chart          costChart
}

// costChart is a stacked bar chart of spend per day, laid out here: the
// template draws its rects.
type costChart struct {
	Width, Height int
	Bars          []costBar
	Legend        []costLegend
	Max           float64
}

type costBar struct {
	Day   string
	X     int
	Parts []costRect
}

type costRect struct {
	Key       string
	Y, H      int
	Spend     float64
	ColorSlot int
}

type costLegend struct {
	Key       string
	ColorSlot int
}

// costColors is how many colors the chart cycles through (monitor.css
// .c0 .. .c7); keys past the seventh share the last, "other".
const costColors = 8

func (m *Monitor) serveCost(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := costData{By: strings.TrimSpace(q.Get("by")), Since: strings.TrimSpace(q.Get("since")), Tag: strings.TrimSpace(q.Get("tag"))}
	if d.By == "" {
		d.By = "directive"
	}
	if d.Since == "" {
		d.Since = "14d"
	}
	f := orchestrator.Filter{}
	err := orchestrator.CheckCostKey(d.By)
	if err == nil {
		err = orchestrator.ListRange(&f, strings.Fields(d.Tag), d.Since, "", "")
	}
	if err != nil {
		m.errorPage(w, r, http.StatusBadRequest, err.Error())
		return
	}
	ctx := r.Context()
	if d.Report, err = m.cfg.Orch.CostReport(ctx, d.By, f); err != nil {
		m.fail(w, r, err)
		return
	}
	series, err := m.cfg.Orch.CostSeries(ctx, d.By, f)
	if err != nil {
		m.fail(w, r, err)
		return
	}
	d.Chart = layoutCost(series)
	m.render(w, r, http.StatusOK, m.pages.cost, page{Title: "Cost by " + d.By, Nav: "cost", Data: d})
}

// layoutCost lays out series as bars of 24 px a day, 200 px high at the
// most spent day; each bar's parts stack the keys, most spent at the
// bottom.
func layoutCost(s *orchestrator.CostSeries) costChart {
	const barW, gap, height = 24, 8, 200
	slot := map[string]int{}
	c := costChart{Height: height + 20}
	for i, k := range s.Keys {
		slot[k] = min(i, costColors-1)
		if i < costColors {
			c.Legend = append(c.Legend, costLegend{Key: k, ColorSlot: slot[k]})
		}
	}
	if len(s.Keys) > costColors {
		c.Legend[costColors-1].Key = fmt.Sprintf("%d others", len(s.Keys)-costColors+1)
	}
	for _, day := range s.Days {
		var sum float64
		for _, v := range s.Spend[day] {
			sum += v
		}
		c.Max = max(c.Max, sum)
	}
	for i, day := range s.Days {
		bar := costBar{Day: day, X: i * (barW + gap)}
		y := height
		for _, k := range s.Keys {
			v, ok := s.Spend[day][k]
			if !ok || c.Max == 0 {
				continue
			}
			h := max(int(v/c.Max*height+0.5), 1)
			y -= h
			bar.Parts = append(bar.Parts, costRect{Key: k, Y: y, H: h, Spend: v, ColorSlot: slot[k]})
		}
		c.Bars = append(c.Bars, bar)
	}
	c.Width = max(len(s.Days)*(barW+gap), 200)
	return c
}

// dayLabel is a day's short label under its bar (12-01).
func dayLabel(day string) string {
	t, err := time.Parse("2006-01-02", day)
	if err != nil {
		return day
	}
	return t.Format("01-02")
}
