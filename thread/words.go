package thread

import "strconv"

// Count is n with the word for its count, as people read it: "1 step",
// "2 steps", "0 steps". Every surface that counts things for people (the
// CLI's lines, the monitor's pages) says them so, never "1 steps".
func Count(n int, one, many string) string {
	if n == 1 || n == -1 {
		return strconv.Itoa(n) + " " + one
	}
	return strconv.Itoa(n) + " " + many
}
