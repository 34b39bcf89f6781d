package graph

// References parses s as an interpolated string (section 7) and returns
// the first element of every path its references name (a literal names
// none), in order: "${inputs.repo || inputs.url}" gives inputs, inputs.
// The error is s's first malformed reference.
func References(s string) ([]string, error) {
	t, err := parseTemplate(s)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range t {
		if p.ref == nil {
			continue
		}
		for _, term := range p.ref.terms {
			if !term.isLit && len(term.path) > 0 {
				out = append(out, term.path[0])
			}
		}
	}
	return out, nil
}
