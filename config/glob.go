package config

// GlobMatch reports whether s matches glob, a glob of the configuration
// files (RateRule.MatchesModel's: `*` crosses `/`); a malformed glob
// matches nothing.
func GlobMatch(glob, s string) bool {
	re, err := compiledGlob(glob)
	return err == nil && re.MatchString(s)
}

// CheckGlob is why glob does not compile (a class not closed, a trailing
// backslash), or nil.
func CheckGlob(glob string) error {
	_, err := compiledGlob(glob)
	return err
}
