package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFleetScriptSyntaxAndShellcheck(t *testing.T) {
	t.Parallel()
	if out, err := exec.Command("bash", "-n", "fleet.sh").CombinedOutput(); err != nil {
		t.Fatalf("bash -n fleet.sh: %v\n%s", err, out)
	}
	fi, err := os.Stat("fleet.sh")
	require.NoError(t, err)
	require.NotEqualValues(t, 0, fi.Mode()&0o111, "fleet.sh is not executable")
	sc, err := exec.LookPath("shellcheck")
	if err != nil {
		require.NotEqual(t, "1", os.Getenv("SPOOL_TEST_REQUIRE_REAL"), "shellcheck not on PATH, and SPOOL_TEST_REQUIRE_REAL=1 (.ci/run installs it)")
		t.Skip("shellcheck not on PATH (apt-get install shellcheck)")
	}
	out, err := exec.Command(sc, "fleet.sh").CombinedOutput()
	require.NoError(t, err, "shellcheck fleet.sh: %v\n%s", err, out)
}

// TestFleetScriptWithFakeSpool runs deploy/fleet.sh end to end against
// real redis-server and versitygw processes, with testdata/fakespool
// standing in for the spool binary (a file-backed queue that speaks the
// commands the script uses). It tests the script: free ports, scale events,
// draining workers, the report, and that a lost thread fails the run.
func TestFleetScriptWithFakeSpool(t *testing.T) {
	t.Parallel()
	// Like internal/testing/testenv: in CI (SPOOL_TEST_REQUIRE_REAL=1) a missing
	// service fails the test instead of skipping it.
	skip := t.Skipf
	if os.Getenv("SPOOL_TEST_REQUIRE_REAL") == "1" {
		skip = t.Fatalf
	}
	for _, tool := range []string{"redis-server", "redis-cli", "curl", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			skip("%s not on PATH", tool)
		}
	}
	if _, err := exec.LookPath("versitygw"); err != nil {
		if _, err := os.Stat(filepath.Join(os.Getenv("HOME"), "go", "bin", "versitygw")); err != nil {
			skip("versitygw not on PATH or in ~/go/bin")
		}
	}
	fake := filepath.Join(t.TempDir(), "fakespool")
	out, err := exec.Command("go", "build", "-o", fake, "./testdata/fakespool").CombinedOutput()
	require.NoError(t, err, "build fakespool: %v\n%s", err, out)

	tests := []struct {
		name       string
		env        []string
		wantFail   bool
		handedBack bool // workers scaled down mid-batch must hand threads back
		want       []string
	}{
		{
			// Turns long enough that the 8 slots of the first two workers
			// are busy when they are scaled down at STEP: they hand back.
			// Two seconds a turn leave the plan room on a loaded machine,
			// where starting the third worker alone took 3 s and a
			// 300 ms batch was over before the scale-down was due.
			name:       "nothing lost",
			env:        []string{"THREADS=16", "WORKERS=2", "STEP=0.5", "SCALE_PLAN=+1 -2", "FAKE_TURN_MS=2000"},
			handedBack: true,
			want: []string{
				"threads pushed:    16 of 16", "scale +1", "scale -2",
				"drained and exited 0", "completions:       16 completed", "throughput:",
				"scale-downs:       1 of 1 planned landed with threads in flight;", "\nlost: 0\n",
			},
		},
		{
			// A batch too fast for the plan: by progress the scale-down
			// is due only when everything has completed.
			name:     "a scale-down after the batch fails the run",
			env:      []string{"THREADS=2", "WORKERS=1", "STEP=30", "SCALE_PLAN=+1 -1"},
			wantFail: true,
			want: []string{
				"scale -1 skipped: the batch finished first", "scale-downs:       0 of 1 planned",
				"SCALE-DOWN MISSED: 1 of 1 planned scale-downs never landed while threads were in flight", "\nlost: 0\n",
			},
		},
		{
			name:     "a scale-down with one worker left fails the run",
			env:      []string{"THREADS=8", "WORKERS=1", "STEP=0.2", "SCALE_PLAN=-1", "FAKE_TURN_MS=200"},
			wantFail: true,
			want:     []string{"scale -1: keeping one worker serving, stopping 0", "SCALE-DOWN MISSED: 1 of 1", "\nlost: 0\n"},
		},
		{
			name:     "a dropped thread is reported lost",
			env:      []string{"THREADS=8", "WORKERS=1", "STEP=0.2", "SCALE_PLAN=+1", "TIMEOUT=3", "FAKE_LOSE=1"},
			wantFail: true,
			want:     []string{"threads pushed:    8 of 8", "LOST: "},
		},
		{
			name:     "bad parameters",
			env:      []string{"SCALE_PLAN=up"},
			wantFail: true,
			want:     []string{`fleet: SCALE_PLAN step "up": want +N or -N`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command("bash", "fleet.sh")
			cmd.Env = append(os.Environ(), append([]string{"SPOOL_BIN=" + fake, "TMPDIR=" + t.TempDir()}, tt.env...)...)
			out, err := cmd.CombinedOutput()
			require.Equal(t, tt.wantFail, err != nil, "fleet.sh error = %v, wantFail %v\n%s", err, tt.wantFail, out)
			for _, w := range tt.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("output lacks %q\n%s", w, out)
				}
			}
			if !tt.wantFail && strings.Contains(string(out), "LOST") {
				t.Errorf("a clean run reports lost threads\n%s", out)
			}
			// The summary's hand-back counts are the sums of the drained
			// workers' lines, split by why each worker was stopped.
			if m := handedBackSummary.FindStringSubmatch(string(out)); m == nil {
				require.NotContains(t, string(out), "== spool fleet ==", "the report has no hand-back summary\n%s", out)
			} else {
				mid, _ := strconv.Atoi(m[1])
				end, _ := strconv.Atoi(m[2])
				sum := 0
				for _, w := range drainedWorker.FindAllStringSubmatch(string(out), -1) {
					n, _ := strconv.Atoi(w[1])
					sum += n
				}
				require.Equal(t, sum, mid+end, "summary says %d+%d handed back, the drained workers say %d\n%s", mid, end, sum, out)
				if tt.handedBack && mid == 0 {
					t.Errorf("workers scaled down mid-batch handed nothing back\n%s", out)
				}
				if m := ranAtStop.FindStringSubmatch(string(out)); m == nil {
					t.Errorf("the report does not say what the stopped workers were running\n%s", out)
				} else if ran, _ := strconv.Atoi(m[1]); ran < mid {
					t.Errorf("stopped workers were running %d activations but handed back %d\n%s", ran, mid, out)
				}
			}
		})
	}
}

var (
	handedBackSummary = regexp.MustCompile(`\nhanded back: +(\d+) activations by workers scaled down mid-batch, (\d+) at the final stop\n`)
	drainedWorker     = regexp.MustCompile(`\] .*worker \d+ \(pid \d+\) (?:drained and exited 0|exited with status \d+) after [0-9.]+s, handed back (\d+), finished \d+`)
	ranAtStop         = regexp.MustCompile(`\nscale-downs: .* the workers they stopped were running (\d+) activations\n`)
)
