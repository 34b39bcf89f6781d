package testenv

import (
	"os"
	"os/exec"
	"sync"
)

// nodeProcess is the redis-server process of a test node and its log
// file, guarded by mu: what a ClusterNode and a SentinelNode share.
type nodeProcess struct {
	mu   sync.Mutex
	cmd  *exec.Cmd
	logf *os.File
}

// Kill kills the node with SIGKILL, as a crash.
func (p *nodeProcess) Kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
		p.cmd = nil
		_ = p.logf.Close()
	}
}
