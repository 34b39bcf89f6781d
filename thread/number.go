package thread

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Number is v as a finite float64, by the one rule for every number spool
// reads from YAML, JSON, templates and command lines (limits, directive
// inputs, configuration, template arithmetic): any Go integer or float
// kind, a json.Number, or a string that holds a number (spaces around it
// ignored). NaN, ±Inf, nil, booleans and everything else are errors that
// say what v is.
func Number(v any) (float64, error) {
	var f float64
	switch x := v.(type) {
	case json.Number:
		n, err := strconv.ParseFloat(string(x), 64)
		if err != nil {
			return 0, fmt.Errorf("%q is not a number", string(x))
		}
		f = n
	case string:
		n, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
		if err != nil || math.IsNaN(n) || math.IsInf(n, 0) {
			return 0, fmt.Errorf("%q is not a number", x)
		}
		return n, nil
	case nil:
		return 0, fmt.Errorf("a missing value is not a number")
	default:
		n, ok := KindNumber(v)
		if !ok {
			return 0, fmt.Errorf("%v (%T) is not a number", v, v)
		}
		f = n
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%v is not a finite number", v)
	}
	return f, nil
}

// KindNumber is v as a float64 when v is of one of Go's integer or float
// kinds; ok is false for anything else (a string, json.Number). It may be
// NaN or ±Inf.
func KindNumber(v any) (float64, bool) {
	switch x := v.(type) {
	case int:
		return float64(x), true
	case int8:
		return float64(x), true
	case int16:
		return float64(x), true
	case int32:
		return float64(x), true
	case int64:
		return float64(x), true
	case uint:
		return float64(x), true
	case uint8:
		return float64(x), true
	case uint16:
		return float64(x), true
	case uint32:
		return float64(x), true
	case uint64:
		return float64(x), true
	case float32:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}

// Bool is v as a boolean, by the one rule for every boolean spool reads
// from YAML, JSON, templates and command lines (directive inputs, hook
// conditions): a bool, or a string "true" or "false" in any case with
// spaces around it ignored. ok is false for anything else.
func Bool(v any) (b, ok bool) {
	switch x := v.(type) {
	case bool:
		return x, true
	case string:
		switch strings.ToLower(strings.TrimSpace(x)) {
		case "true":
			return true, true
		case "false":
			return false, true
		}
	}
	return false, false
}
