package launch

import (
	"fmt"
	"os"

	"github.com/spool-run/spool/config"
	"github.com/spool-run/spool/provider"
)

// ReadScript reads the script of a "script:PATH" model from the project
// for a thread that does not start from a bundle of the project (a fork
// on another script, a replay), and checks that it loads; nil for any
// other model. A script outside the project, missing or that does not
// load is refused (ErrRefused).
func ReadScript(project, model string) ([]byte, error) {
	p, ok := config.ScriptPath(model)
	if !ok {
		return nil, nil
	}
	if err := CheckScript(project, model); err != nil {
		return nil, err
	}
	file, _, err := config.ScriptFile(project, model)
	if err != nil {
		return nil, refused(err)
	}
	script, err := os.ReadFile(file)
	if err != nil {
		return nil, refused(fmt.Errorf("model %s: %w", model, err))
	}
	if _, err := provider.ParseScript(p, script); err != nil {
		return nil, refused(err)
	}
	return script, nil
}
