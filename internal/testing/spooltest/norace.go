//go:build !race

package spooltest

const raceEnabled = false
