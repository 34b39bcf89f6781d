package directive

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strings"
)

// maxDepth bounds element nesting in a directive's XML.
const maxDepth = 64

// node is an element of the directive XML with its file line.
type node struct {
	name     string
	attrs    []xml.Attr
	children []*node
	text     strings.Builder // direct character data
	line     int
}

func (n *node) attr(name string) (string, bool) {
	for _, a := range n.attrs {
		if a.Name.Local == name {
			return a.Value, true
		}
	}
	return "", false
}

func (n *node) str(name string) string {
	v, _ := n.attr(name)
	return strings.TrimSpace(v)
}

// content is the trimmed direct text of n.
func (n *node) content() string { return strings.TrimSpace(n.text.String()) }

// allText is all text inside n, children included, trimmed.
func (n *node) allText() string {
	var b strings.Builder
	var walk func(*node)
	walk = func(x *node) {
		b.WriteString(x.text.String())
		for _, c := range x.children {
			walk(c)
		}
	}
	walk(n)
	return strings.TrimSpace(b.String())
}

// tag renders the element for error messages, optionally with one attribute.
func (n *node) tag(attr ...string) string {
	if len(attr) == 0 {
		return "<" + n.name + ">"
	}
	v, _ := n.attr(attr[0])
	return fmt.Sprintf("<%s %s=%q>", n.name, attr[0], v)
}

// parseXML parses src (the fence's content, whose first line is file line
// firstLine) into a tree and returns its single root element.
func parseXML(path string, src []byte, firstLine int) (*node, error) {
	dec := xml.NewDecoder(bytes.NewReader(src))
	dec.Strict = false // tolerate bare & and HTML entities in prose
	dec.Entity = xml.HTMLEntity
	t := xmlTree{path: path}
	for {
		line, _ := dec.InputPos()
		off := dec.InputOffset()
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, syntaxError(path, firstLine, err)
		}
		fileLine := firstLine + line - 1
		switch x := tok.(type) {
		case xml.StartElement:
			err = t.start(x, fileLine)
		case xml.EndElement:
			err = t.end(x, fileLine, src[off:dec.InputOffset()])
		case xml.CharData:
			err = t.text(x, fileLine)
		}
		if err != nil {
			return nil, err
		}
	}
	return t.done(firstLine)
}

// syntaxError is the ParseError of the decoder's error err, at the line
// it names when it is a syntax error.
func syntaxError(path string, firstLine int, err error) *ParseError {
	var se *xml.SyntaxError
	l := firstLine
	msg := err.Error()
	if errors.As(err, &se) {
		l = firstLine + se.Line - 1
		msg = se.Msg
	}
	return &ParseError{Path: path, Line: l, Msg: "xml: " + msg}
}

// xmlTree is the tree parseXML builds as it reads the tokens of the file
// path. The open elements sit in an array, as they are at most maxDepth:
// the tree lives on parseXML's stack, with no allocation of its own.
type xmlTree struct {
	path  string
	root  *node
	open  [maxDepth]*node // the open elements, the innermost last
	depth int             // how many are open
}

// start opens the element t, read on file line line: the root, which
// must be the only one, or a child of the innermost open element, at most
// maxDepth deep.
func (x *xmlTree) start(t xml.StartElement, line int) error {
	n := &node{name: t.Name.Local, attrs: t.Attr, line: line}
	if x.depth == 0 {
		if x.root != nil {
			return &ParseError{Path: x.path, Line: line, Elem: n.tag(), Msg: "a second root element; the fence must hold one <directive>"}
		}
		x.root = n
	} else {
		p := x.open[x.depth-1]
		p.children = append(p.children, n)
	}
	if x.depth >= maxDepth {
		return &ParseError{Path: x.path, Line: line, Elem: n.tag(), Msg: fmt.Sprintf("nested deeper than %d elements", maxDepth)}
	}
	x.open[x.depth] = n
	x.depth++
	return nil
}

// end closes the innermost open element at the end tag t, read on file
// line line from the text raw.
func (x *xmlTree) end(t xml.EndElement, line int, raw []byte) error {
	// The lenient decoder takes an end tag that names another element as
	// closing the open one too, so a <model tier="x"> missing its "/"
	// would silently swallow the <limits> and <permissions> after it. An
	// end tag read from the text must name the element it closes (a
	// self-closed element's end reads no text).
	if name := endTagName(raw); name != "" && name != t.Name.Local && x.depth > 0 {
		open := x.open[x.depth-1]
		return &ParseError{Path: x.path, Line: open.line, Elem: open.tag(),
			Msg: fmt.Sprintf("element is not closed before </%[2]s> on line %[1]d", line, name)}
	}
	if x.depth > 0 {
		x.depth--
	}
	return nil
}

// text adds the character data t, read on file line line, to the
// innermost open element; outside the root, only space may stand.
func (x *xmlTree) text(t xml.CharData, line int) error {
	if x.depth > 0 {
		x.open[x.depth-1].text.Write(t)
		return nil
	}
	if strings.TrimSpace(string(t)) != "" {
		return &ParseError{Path: x.path, Line: line, Msg: "text outside the <directive> element"}
	}
	return nil
}

// done returns the root once every token is read: there must be one, and
// every element must be closed.
func (x *xmlTree) done(firstLine int) (*node, error) {
	if x.root == nil {
		return nil, &ParseError{Path: x.path, Line: firstLine, Msg: "the xml fence holds no element"}
	}
	if x.depth > 0 {
		open := x.open[x.depth-1]
		return nil, &ParseError{Path: x.path, Line: open.line, Elem: open.tag(), Msg: "element is not closed"}
	}
	return x.root, nil
}

// endTagName is the local name of the end tag raw ("</ns:name >"), ""
// when raw is not one (the end of a self-closed element reads no text).
func endTagName(raw []byte) string {
	s, ok := strings.CutPrefix(string(raw), "</")
	if !ok {
		return ""
	}
	s = strings.TrimSpace(strings.TrimSuffix(s, ">"))
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		s = s[i+1:]
	}
	return s
}
