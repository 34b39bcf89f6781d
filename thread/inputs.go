package thread

import (
	"encoding/json"
	"errors"
	"fmt"
)

// MaxInputsBytes is the most a thread's inputs may hold, as JSON: they
// live in its registry record (Redis) and thread.json and reach its
// prompts. `spool thread run --inputs-json`, `--input`, the API's and MCP's
// run, and a tool's spawn are all held to it.
const MaxInputsBytes = 1 << 20

// ErrInputsTooLarge means a thread's inputs are over MaxInputsBytes.
var ErrInputsTooLarge = errors.New("inputs too large")

// CheckInputs refuses (ErrInputsTooLarge) inputs over MaxInputsBytes as
// JSON, and inputs that are no JSON at all.
func CheckInputs(inputs map[string]any) error {
	b, err := json.Marshal(inputs)
	if err != nil {
		return fmt.Errorf("inputs: %w", err)
	}
	return CheckInputsSize(len(b))
}

// CheckInputsSize refuses (ErrInputsTooLarge) n bytes of inputs' JSON
// over MaxInputsBytes.
func CheckInputsSize(n int) error {
	if n > MaxInputsBytes {
		return fmt.Errorf("inputs of %d bytes as JSON: at most %d (1 MiB): %w", n, MaxInputsBytes, ErrInputsTooLarge)
	}
	return nil
}
