package directive

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// ErrNotFound is returned (wrapped: `directive "x" not found`) when no
// space holds the directive.
var ErrNotFound = errors.New("not found")

// Space names.
const (
	SpaceProject = "project"
	SpaceUser    = "user"
	SpaceSystem  = "system"
)

// DirectivesDir is where directives live inside a project or user root.
const DirectivesDir = ".ai/directives"

// DefaultContinuation is the system directive that renders a continuation
// thread's seed message (see ContinuationSeed).
const DefaultContinuation = "rye/agent/continuation"

//go:embed system
var systemFS embed.FS

// Space is one place directives are looked up: FS is rooted at the
// directives directory, so directive "a/b" is the file "a/b.md".
type Space struct {
	Name string
	FS   fs.FS
}

// Resolver finds directives in its spaces, first match wins.
type Resolver struct {
	Spaces []Space
}

// SystemSpace is the directives built into the binary.
func SystemSpace() Space {
	sub, err := fs.Sub(systemFS, "system/directives")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return Space{Name: SpaceSystem, FS: sub}
}

// SpaceAt returns a space over root/.ai/directives of fsys.
func SpaceAt(name string, fsys fs.FS, root string) Space {
	dir := path.Join(root, DirectivesDir)
	sub, err := fs.Sub(fsys, dir)
	if err != nil { // only for an invalid root
		sub = emptyFS{}
	}
	return Space{Name: name, FS: sub}
}

// NewResolver resolves over projectDir/.ai/directives, then
// homeDir/.ai/directives (skipped when homeDir is ""), then the system
// space.
func NewResolver(projectDir, homeDir string) *Resolver {
	r := &Resolver{}
	if projectDir != "" {
		r.Spaces = append(r.Spaces, Space{Name: SpaceProject, FS: os.DirFS(filepath.Join(projectDir, filepath.FromSlash(DirectivesDir)))})
	}
	if homeDir != "" {
		r.Spaces = append(r.Spaces, Space{Name: SpaceUser, FS: os.DirFS(filepath.Join(homeDir, filepath.FromSlash(DirectivesDir)))})
	}
	r.Spaces = append(r.Spaces, SystemSpace())
	return r
}

// CleanName validates a directive name ("test/limits/depth_child",
// optionally with ".md") and returns it without the extension.
func CleanName(name string) (string, error) {
	n := strings.TrimSuffix(strings.TrimSpace(name), ".md")
	if n == "" {
		return "", fmt.Errorf("directive name is empty")
	}
	if strings.HasPrefix(n, "/") || strings.Contains(n, "\\") || !fs.ValidPath(n+".md") {
		return "", fmt.Errorf("directive name %q: must be a relative slash-separated path without . or .. segments", name)
	}
	return n, nil
}

// Find returns the raw file of directive name from the first space that
// has it, with that space's name.
func (r *Resolver) Find(name string) (data []byte, space string, err error) {
	n, err := CleanName(name)
	if err != nil {
		return nil, "", err
	}
	for _, s := range r.Spaces {
		if s.FS == nil {
			continue
		}
		data, err := fs.ReadFile(s.FS, n+".md")
		if err == nil {
			return data, s.Name, nil
		}
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, fs.ErrInvalid) {
			return nil, s.Name, fmt.Errorf("read directive %q from %s space: %w", n, s.Name, err)
		}
	}
	return nil, "", fmt.Errorf("directive %q %w", n, ErrNotFound)
}

// Resolve finds and parses directive name. The directive's Path is
// "<space>:.ai/directives/<name>.md" so errors say where it came from; a
// parse error in a higher space is returned, not skipped, as is a
// directive whose name attribute does not match its file (CheckName).
func (r *Resolver) Resolve(name string) (*Directive, string, error) {
	data, space, err := r.Find(name)
	if err != nil {
		return nil, space, err
	}
	n, _ := CleanName(name)
	d, err := Parse(space+":"+path.Join(DirectivesDir, n+".md"), data)
	if err != nil {
		return nil, space, err
	}
	if err := CheckName(d, n); err != nil {
		return nil, space, err
	}
	return d, space, nil
}

// ContinuationSeed renders the seed message of a continuation thread: the
// Markdown body (not the xml fence) of the continuation directive cont (normally DefaultContinuation from
// Resolve): the original directive's name and its body rendered with the
// thread's inputs (as the thread's first prompt was, so the model reads
// "for Ada", not "for {input:who}"), the thread that handed off, and the
// continuation instruction ("" for the directive's default).
func ContinuationSeed(cont *Directive, originalName string, original *Directive, inputs map[string]any, previousThreadID, message string) (string, error) {
	in := map[string]any{
		"original_directive": originalName,
		"original_body":      render(original, original.Body, inputs),
		"previous_thread_id": previousThreadID,
	}
	if message != "" {
		in["continuation_message"] = message
	}
	v, err := ValidateInputs(cont, in)
	if err != nil {
		return "", err
	}
	return render(cont, cont.Body, v), nil
}

type emptyFS struct{}

func (emptyFS) Open(name string) (fs.File, error) {
	return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
}
