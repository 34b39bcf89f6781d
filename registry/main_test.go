package registry

import (
	"testing"

	"github.com/spool-run/spool/internal/testing/testenv"
)

func TestMain(m *testing.M) { testenv.MainLeakFree(m) }
