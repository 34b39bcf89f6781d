package main

// The CLI reference (docs/cli.md) is generated from the command
// definitions of newApp, so it cannot drift from them: TestDocsCLIReference
// renders it and fails when the file differs, naming the command that
// rewrites it. TestDocsLinks holds the hand-written pages to the
// repository: every relative link in README.md, ARCHITECTURE.md and
// docs/*.md names a file that exists.

//go:generate go test -run ^TestDocsCLIReference$ -update-docs .

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

var updateDocs = flag.Bool("update-docs", false, "rewrite docs/cli.md from the command definitions")

// regenerateDocs is the command that rewrites docs/cli.md, as the failing
// test and the file itself say it.
const regenerateDocs = "go generate ./cmd/spool (or: task docs)"

// repoRoot is the repository's root, from this package's directory.
const repoRoot = "../.."

// TestDocsCLIReference: docs/cli.md is what the command definitions
// render. Run `go generate ./cmd/spool` after changing a command or a flag.
func TestDocsCLIReference(t *testing.T) {
	// Not parallel: urfave/cli apps share package state (its help command).
	want := renderCLIReference(newApp(&bytes.Buffer{}, &bytes.Buffer{}))
	path := filepath.Join(repoRoot, "docs", "cli.md")
	if *updateDocs {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("docs/cli.md: %v; generate it with: %s", err, regenerateDocs)
	}
	if string(got) != want {
		t.Fatalf("docs/cli.md is not current with the command definitions (first difference at line %d); regenerate it with: %s",
			firstDiffLine(string(got), want), regenerateDocs)
	}
}

// firstDiffLine is the first line (from 1) where a and b differ.
func firstDiffLine(a, b string) int {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < min(len(al), len(bl)); i++ {
		if al[i] != bl[i] {
			return i + 1
		}
	}
	return min(len(al), len(bl)) + 1
}

// renderCLIReference renders every command of app, its usage, description
// and flags (with their environment variables and defaults), as Markdown.
func renderCLIReference(app *cli.App) string {
	var b strings.Builder
	b.WriteString("# CLI reference\n\n")
	b.WriteString("<!-- Generated from the command definitions in cmd/spool; do not edit. Regenerate with: " + regenerateDocs + " -->\n\n")
	fmt.Fprintf(&b, "`%s`: %s.\n\n", app.Name, mdText(app.Usage))
	b.WriteString("This page is generated from the command definitions, so it says what the binary accepts. " +
		"Every command also takes `--help`. Global options may be given anywhere on the command line " +
		"(`spool thread run --project examples demo/hello` works). Every option that names an environment " +
		"variable reads it when the option is not given; the option wins. Exit codes: 0 success, " +
		"1 a failed operation, 2 bad usage (an error is one line on stderr).\n\n")

	b.WriteString("## Commands\n\n")
	var toc func(prefix string, cmds []*cli.Command, depth int)
	toc = func(prefix string, cmds []*cli.Command, depth int) {
		for _, c := range visible(cmds) {
			name := prefix + " " + c.Name
			fmt.Fprintf(&b, "%s- [`%s`](#%s): %s\n", strings.Repeat("  ", depth), name, anchor(name), mdText(c.Usage))
			toc(name, c.Subcommands, depth+1)
		}
	}
	toc(app.Name, app.Commands, 0)
	b.WriteString("\n## Global options\n\n")
	flagTable(&b, app.Flags)

	var cmd func(prefix string, c *cli.Command, level int)
	cmd = func(prefix string, c *cli.Command, level int) {
		name := prefix + " " + c.Name
		fmt.Fprintf(&b, "%s %s\n\n", strings.Repeat("#", level), name)
		fmt.Fprintf(&b, "%s.\n\n", capitalize(mdText(c.Usage)))
		if len(c.Aliases) > 0 {
			fmt.Fprintf(&b, "Also: %s.\n\n", codeList(c.Aliases))
		}
		subs := visible(c.Subcommands)
		line := name
		if len(subs) > 0 {
			line += " COMMAND"
		}
		if len(visibleFlags(c.Flags)) > 0 {
			line += " [options]"
		}
		if c.ArgsUsage != "" {
			line += " " + c.ArgsUsage
		}
		fmt.Fprintf(&b, "```\n%s\n```\n\n", line)
		if c.Description != "" {
			description(&b, c.Description)
		}
		if len(visibleFlags(c.Flags)) > 0 {
			flagTable(&b, c.Flags)
		}
		if len(subs) > 0 {
			b.WriteString("| command | what it does |\n| --- | --- |\n")
			for _, s := range subs {
				sn := name + " " + s.Name
				fmt.Fprintf(&b, "| [`%s`](#%s) | %s |\n", sn, anchor(sn), cell(s.Usage))
			}
			b.WriteString("\n")
			for _, s := range subs {
				cmd(name, s, min(level+1, 4))
			}
		}
	}
	for _, c := range visible(app.Commands) {
		cmd(app.Name, c, 2)
	}
	return b.String()
}

// visible are the commands not hidden.
func visible(cmds []*cli.Command) []*cli.Command {
	var out []*cli.Command
	for _, c := range cmds {
		if !c.Hidden {
			out = append(out, c)
		}
	}
	return out
}

// visibleFlags are the flags not hidden.
func visibleFlags(flags []cli.Flag) []cli.Flag {
	var out []cli.Flag
	for _, f := range flags {
		if v, ok := f.(cli.VisibleFlag); ok && !v.IsVisible() {
			continue
		}
		out = append(out, f)
	}
	return out
}

// flagTable renders flags as a table: the option as typed, its
// environment variables, its default and what it does.
func flagTable(b *strings.Builder, flags []cli.Flag) {
	b.WriteString("| option | environment | default | description |\n| --- | --- | --- | --- |\n")
	for _, f := range visibleFlags(flags) {
		names := f.Names()
		var spelled []string
		for _, n := range names {
			dash := "--"
			if len(n) == 1 {
				dash = "-"
			}
			spelled = append(spelled, dash+n)
		}
		opt := strings.Join(spelled, ", ")
		usage, env, def := "", "", ""
		if d, ok := f.(cli.DocGenerationFlag); ok {
			usage = d.GetUsage()
			env = codeList(d.GetEnvVars())
			if d.TakesValue() {
				opt += " VALUE"
				def = flagDefault(d)
			} else if d.GetDefaultText() == "true" {
				def = "true"
			}
			if s, ok := f.(cli.DocGenerationSliceFlag); ok && s.IsSliceFlag() {
				usage += " (repeatable)"
				if strings.Contains(d.GetUsage(), "repeatable") {
					usage = d.GetUsage()
				}
			}
		}
		if r, ok := f.(cli.RequiredFlag); ok && r.IsRequired() {
			usage += " (required)"
		}
		if strings.Contains(usage, "(default") {
			def = "" // the description says what it is
		}
		if def != "" {
			def = "`" + def + "`"
		}
		fmt.Fprintf(b, "| `%s` | %s | %s | %s |\n", opt, env, def, cell(usage))
	}
	b.WriteString("\n")
}

// flagDefault is the default a valued flag shows in --help: its default
// text, else its value ("" for none).
func flagDefault(d cli.DocGenerationFlag) string {
	if t := d.GetDefaultText(); t != "" {
		return strings.Trim(t, `"`)
	}
	return d.GetValue()
}

// description renders a command's description: its prose as paragraphs,
// and each run of indented lines (the examples) as a code block.
func description(b *strings.Builder, desc string) {
	lines := strings.Split(strings.TrimRight(desc, "\n"), "\n")
	for i := 0; i < len(lines); {
		if indented(lines[i]) {
			j := i
			for j < len(lines) && indented(lines[j]) {
				j++
			}
			indent := len(lines[i]) - len(strings.TrimLeft(lines[i], " \t"))
			b.WriteString("```sh\n")
			for _, l := range lines[i:j] {
				b.WriteString(strings.TrimRight(cutIndent(l, indent), " ") + "\n")
			}
			b.WriteString("```\n\n")
			i = j
			continue
		}
		j := i
		for j < len(lines) && strings.TrimSpace(lines[j]) != "" && !indented(lines[j]) {
			j++
		}
		if j > i {
			var para []string
			for _, l := range lines[i:j] {
				para = append(para, mdText(strings.TrimSpace(l)))
			}
			b.WriteString(strings.Join(para, "\n") + "\n\n")
		}
		for j < len(lines) && strings.TrimSpace(lines[j]) == "" {
			j++
		}
		i = j
	}
}

func indented(l string) bool {
	return strings.TrimSpace(l) != "" && (strings.HasPrefix(l, "  ") || strings.HasPrefix(l, "\t"))
}

// cutIndent removes up to n leading blanks of l.
func cutIndent(l string, n int) string {
	for i := 0; i < n && len(l) > 0 && (l[0] == ' ' || l[0] == '\t'); i++ {
		l = l[1:]
	}
	return l
}

// mdText escapes what Markdown would read as markup in plain text,
// leaving `code spans` as written.
func mdText(s string) string {
	var b strings.Builder
	inCode := false
	for i, r := range s {
		switch {
		case r == '`':
			inCode = !inCode
		case inCode:
		case r == '<':
			b.WriteString("&lt;")
			continue
		case r == '>':
			b.WriteString("&gt;")
			continue
		case r == '_' && i > 0 && i+1 < len(s) && isWordByte(s[i-1]) && isWordByte(s[i+1]):
			// Inside a word (ANTHROPIC_API_KEY) an underscore is no markup.
		case r == '*' || r == '_' || r == '[' || r == ']' || r == '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

func isWordByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// cell is text for a table cell: escaped, one line, pipes quoted.
func cell(s string) string {
	return strings.ReplaceAll(mdText(strings.Join(strings.Fields(s), " ")), "|", `\|`)
}

func codeList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = "`" + n + "`"
	}
	return strings.Join(q, ", ")
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// anchor is the fragment GitHub gives a heading's text.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// TestDocsLinks: every relative link in README.md, ARCHITECTURE.md and
// docs/*.md resolves to a file or directory in the repository, and none
// points outside it (the pages must stand alone in a clone).
func TestDocsLinks(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	pages := []string{filepath.Join(root, "README.md"), filepath.Join(root, "ARCHITECTURE.md")}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) < 5 {
		t.Fatalf("docs/ holds %d pages; want the documentation there", len(docs))
	}
	pages = append(pages, docs...)
	checked := 0
	for _, page := range pages {
		data, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, page)
		for _, l := range markdownLinks(string(data)) {
			target, fragment, _ := strings.Cut(l.target, "#")
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			if target == "" {
				if fragment != "" && !headingAnchors(string(data))[fragment] {
					t.Errorf("%s:%d: link %q names no heading of the page", rel, l.line, l.target)
				}
				continue
			}
			checked++
			file := filepath.Join(filepath.Dir(page), filepath.FromSlash(target))
			if strings.HasPrefix(target, "/") {
				t.Errorf("%s:%d: link %q is absolute; write it relative to the page", rel, l.line, l.target)
				continue
			}
			if r, err := filepath.Rel(root, file); err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
				t.Errorf("%s:%d: link %q leaves the repository", rel, l.line, l.target)
				continue
			}
			if _, err := os.Stat(file); err != nil {
				t.Errorf("%s:%d: link %q names no file in the repository", rel, l.line, l.target)
				continue
			}
			if fragment != "" && strings.HasSuffix(file, ".md") {
				if b, err := os.ReadFile(file); err == nil && !headingAnchors(string(b))[fragment] {
					t.Errorf("%s:%d: link %q names no heading of %s", rel, l.line, l.target, target)
				}
			}
		}
		if strings.Contains(string(data), "../shared") {
			t.Errorf("%s refers to ../shared, which a clone does not have", rel)
		}
	}
	if checked == 0 {
		t.Fatal("no relative links found: the link parser is broken")
	}
}

// headingAnchors are the fragments GitHub gives the headings of a
// Markdown text (a repeated heading's get -1, -2, ...).
func headingAnchors(text string) map[string]bool {
	out := map[string]bool{}
	fence := ""
	for _, line := range strings.Split(text, "\n") {
		if inFence(&fence, line) {
			continue
		}
		if !strings.HasPrefix(line, "#") {
			continue
		}
		a := anchor(strings.TrimSpace(strings.TrimLeft(line, "#")))
		for n, base := 1, a; out[a]; n++ {
			a = fmt.Sprintf("%s-%d", base, n)
		}
		out[a] = true
	}
	return out
}

// inFence tracks fenced code blocks line by line: it reports whether line
// opens, closes or lies in one. fence is the open fence's marker ("" when
// none): a fence closes at a line of at least as many of its characters
// and nothing else, so a ```` block may hold ``` lines.
func inFence(fence *string, line string) bool {
	trimmed := strings.TrimSpace(line)
	marker := trimmed[:len(trimmed)-len(strings.TrimLeft(trimmed, "`~"))]
	if *fence != "" {
		if strings.HasPrefix(marker, *fence) && marker == trimmed && marker[0] == (*fence)[0] {
			*fence = ""
		}
		return true
	}
	if len(marker) >= 3 && strings.Count(marker, marker[:1]) == len(marker) {
		*fence = marker
		return true
	}
	return false
}

// mdLink is one link of a Markdown page.
type mdLink struct {
	target string
	line   int
}

var (
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	refLink    = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$`)
	codeSpan   = regexp.MustCompile("`+[^`]*`+")
)

// markdownLinks are the inline and reference-style links of a Markdown
// text, outside fenced code blocks and code spans.
func markdownLinks(text string) []mdLink {
	var out []mdLink
	fence := ""
	for i, line := range strings.Split(text, "\n") {
		if inFence(&fence, line) {
			continue
		}
		line = codeSpan.ReplaceAllString(line, "")
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			out = append(out, mdLink{target: m[1], line: i + 1})
		}
		if m := refLink.FindStringSubmatch(line); m != nil {
			out = append(out, mdLink{target: m[1], line: i + 1})
		}
	}
	return out
}
