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
	var root *node
	var stack []*node
	for {
		line, _ := dec.InputPos()
		off := dec.InputOffset()
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			var se *xml.SyntaxError
			l := firstLine
			msg := err.Error()
			if errors.As(err, &se) {
				l = firstLine + se.Line - 1
				msg = se.Msg
			}
			return nil, &ParseError{Path: path, Line: l, Msg: "xml: " + msg}
		}
		fileLine := firstLine + line - 1
		switch t := tok.(type) {
		case xml.StartElement:
			n := &node{name: t.Name.Local, attrs: t.Attr, line: fileLine}
			if len(stack) == 0 {
				if root != nil {
					return nil, &ParseError{Path: path, Line: fileLine, Elem: n.tag(), Msg: "a second root element; the fence must hold one <directive>"}
				}
				root = n
			} else {
				p := stack[len(stack)-1]
				p.children = append(p.children, n)
			}
			if len(stack) >= maxDepth {
				return nil, &ParseError{Path: path, Line: fileLine, Elem: n.tag(), Msg: fmt.Sprintf("nested deeper than %d elements", maxDepth)}
			}
			stack = append(stack, n)
		case xml.EndElement:
			// The lenient decoder takes an end tag that names another
			// element as closing the open one too, so a <model tier="x">
			// missing its "/" would silently swallow the <limits> and
			// <permissions> after it. An end tag read from the text must
			// name the element it closes (a self-closed element's end
			// reads no text).
			if raw := endTagName(src[off:dec.InputOffset()]); raw != "" && raw != t.Name.Local && len(stack) > 0 {
				open := stack[len(stack)-1]
				return nil, &ParseError{Path: path, Line: open.line, Elem: open.tag(),
					Msg: fmt.Sprintf("element is not closed before </%[2]s> on line %[1]d", fileLine, raw)}
			}
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
		case xml.CharData:
			if len(stack) > 0 {
				stack[len(stack)-1].text.Write(t)
			} else if strings.TrimSpace(string(t)) != "" {
				return nil, &ParseError{Path: path, Line: fileLine, Msg: "text outside the <directive> element"}
			}
		}
	}
	if root == nil {
		return nil, &ParseError{Path: path, Line: firstLine, Msg: "the xml fence holds no element"}
	}
	if len(stack) > 0 {
		return nil, &ParseError{Path: path, Line: stack[len(stack)-1].line, Elem: stack[len(stack)-1].tag(), Msg: "element is not closed"}
	}
	return root, nil
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
