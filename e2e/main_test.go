// Package e2e tests spool end to end: the real binary, several worker
// processes, real Redis and (in CI) the real S3-compatible server.
package e2e

import (
	"testing"

	"github.com/spool-run/spool/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
