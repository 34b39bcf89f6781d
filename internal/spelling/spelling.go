// Package spelling tells which known name a mistyped one most likely
// meant, for the "did you mean" of an error: a directive's or a graph's
// name, a node kind, a YAML or JSON key, a CLI command or flag, a
// capability.
package spelling

// Distance is the Damerau-Levenshtein (optimal string alignment) distance
// of a and b: insertions, deletions and substitutions of a rune, and the
// transposition of two adjacent runes ("exeucte" is one edit from
// "execute"), each one edit.
func Distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}

// maxLen is the longest word (bytes) Nearest compares: a name past it is
// no typo of a known one, and the distance's cost grows with the product
// of the lengths (an API body's field name is the client's to choose).
const maxLen = 64

// Nearest is the candidate closest to s, "" when none is close enough to
// be a likely typo of it: 1 edit for a word of up to 3 bytes, 2 up to 6,
// 3 beyond. Ties go to the earlier candidate; a word longer than maxLen,
// s or a candidate, is never near.
func Nearest(s string, candidates []string) string {
	if len(s) > maxLen {
		return ""
	}
	limit := 3
	switch {
	case len(s) <= 3:
		limit = 1
	case len(s) <= 6:
		limit = 2
	}
	best, bestD := "", limit+1
	for _, c := range candidates {
		if len(c) > maxLen {
			continue
		}
		if d := Distance(s, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}
