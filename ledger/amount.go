package ledger

import (
	"fmt"
	"math"
)

// Nano is the number of nano-USD in one USD.
const Nano = 1e9

// MaxAmount is the largest amount (USD) the ledger accepts in one call.
const MaxAmount = 1e6

// ToNano converts USD to integer nano-USD, rounding to the nearest.
func ToNano(usd float64) (int64, error) {
	if math.IsNaN(usd) || math.IsInf(usd, 0) || usd < 0 || usd > MaxAmount {
		return 0, fmt.Errorf("amount %g USD is not a number in [0, %g]", usd, float64(MaxAmount))
	}
	return int64(math.Round(usd * Nano)), nil
}

// FromNano converts nano-USD to USD.
func FromNano(n int64) float64 { return float64(n) / Nano }
