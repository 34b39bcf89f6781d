package admission

import (
	"math"
	"sort"
)

// Demand is one active tenant as the balancer sees it: its weight, its
// demand (admitted + ready: what a share would serve) and its
// max_running (0: unset).
type Demand struct {
	Tenant     string
	Weight     float64
	Demand     int
	MaxRunning int
}

// Shares splits capacity among tenants by weighted max-min fairness
// (8.2): each tenant's part of what is left is in proportion to its
// weight, a tenant whose cap (min(demand, max_running)) is below its part
// gets its cap, and what it leaves is split again among the others. What
// demand leaves of capacity is then split by weight among every tenant
// below its max_running, so work that arrives between two passes starts
// at once (work conservation). Parts are rounded by largest remainder,
// ties broken by rotate (the balancer turns it every pass), and every
// tenant with demand gets at least 1. The result is in the order of ds.
func Shares(capacity int, ds []Demand, rotate int) []int {
	n := len(ds)
	out := make([]int, n)
	if n == 0 {
		return out
	}
	demandCap := make([]float64, n)
	runCap := make([]float64, n)
	w := make([]float64, n)
	for i, d := range ds {
		w[i] = d.Weight
		runCap[i] = math.Inf(1)
		if d.MaxRunning > 0 {
			runCap[i] = float64(d.MaxRunning)
		}
		demandCap[i] = math.Min(float64(d.Demand), runCap[i])
	}
	parts := waterfill(float64(capacity), w, demandCap, make([]float64, n))
	used := 0.0
	for _, p := range parts {
		used += p
	}
	if left := float64(capacity) - used; left > 1e-9 {
		parts = waterfill(float64(capacity), w, runCap, parts)
	}
	round(parts, out, rotate)
	atLeastOne(ds, out)
	return out
}

// waterfill adds to from (the parts each tenant has) what is left of
// total, by weight, none above its cap.
func waterfill(total float64, w, caps, from []float64) []float64 {
	alloc := append([]float64(nil), from...)
	left := total
	active := make([]bool, len(w))
	for i := range w {
		left -= alloc[i]
		active[i] = caps[i]-alloc[i] > 1e-12 && w[i] > 0
	}
	for left > 1e-9 {
		sum := 0.0
		for i, a := range active {
			if a {
				sum += w[i]
			}
		}
		if sum == 0 {
			break
		}
		capped := false
		for i, a := range active {
			if a && caps[i]-alloc[i] <= left*w[i]/sum {
				left -= caps[i] - alloc[i]
				alloc[i], active[i], capped = caps[i], false, true
			}
		}
		if capped {
			continue
		}
		for i, a := range active {
			if a {
				alloc[i] += left * w[i] / sum
			}
		}
		left = 0
	}
	return alloc
}

// round rounds parts into out by largest remainder: each its floor, then
// one more to the largest fractions until the rounded total is the
// total's; equal fractions take turns by rotate.
func round(parts []float64, out []int, rotate int) {
	total := 0.0
	sum := 0
	type frac struct {
		i int
		f float64
	}
	fr := make([]frac, len(parts))
	for i, p := range parts {
		total += p
		out[i] = int(math.Floor(p + 1e-9))
		sum += out[i]
		fr[i] = frac{i, p - float64(out[i])}
	}
	n := len(parts)
	sort.SliceStable(fr, func(a, b int) bool {
		if math.Abs(fr[a].f-fr[b].f) > 1e-9 {
			return fr[a].f > fr[b].f
		}
		return (fr[a].i-rotate%n+n)%n < (fr[b].i-rotate%n+n)%n
	})
	for k := 0; sum < int(math.Round(total)) && k < len(fr); k++ {
		if fr[k].f > 1e-9 {
			out[fr[k].i]++
			sum++
		}
	}
}

// atLeastOne gives a slot to each tenant with demand that got none,
// taken from the largest share above one when there is one.
func atLeastOne(ds []Demand, out []int) {
	for i, d := range ds {
		if d.Demand == 0 || out[i] > 0 {
			continue
		}
		big := -1
		for j := range out {
			if out[j] > 1 && (big < 0 || out[j] > out[big]) {
				big = j
			}
		}
		if big >= 0 {
			out[big]--
		}
		out[i] = 1
	}
}
