package otlp

import (
	"testing"

	"go.uber.org/goleak"
)

// The tests start OTLP exporters (gRPC and HTTP): none may outlive its
// shutdown.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
