package transcript

// legacyCanonicalObject returns the CanonLegacy encoding of the JSON
// object data without its top-level _signature member, and that member's
// value (nil when there is none). A name repeated in any object is an
// error.
func legacyCanonicalObject(data []byte) (body, sig []byte, err error) {
	c := getCanonicalizer()
	defer c.release()
	body, err = c.canonical(make([]byte, 0, len(data)), data, true)
	if err != nil {
		return nil, nil, err
	}
	if c.hasSig {
		sig = c.sig
	}
	return body, sig, nil
}
