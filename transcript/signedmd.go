package transcript

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"regexp"
	"time"
)

// The rye signature line (spec/directive-format.md), first line of a signed
// Markdown file:
//
//	<!-- rye:signed:TIMESTAMP:SHA256:SIG:KEYID -->
//
// SHA256 is the hex SHA-256 of the content after that line, SIG the
// base64url Ed25519 signature over the ASCII hex SHA256 (as the reference
// system signs), KEYID the signer's key id. Verification accepts SIG with or
// without padding, base64url or standard.
var mdSigLine = regexp.MustCompile(`^<!-- rye:signed:([0-9T:\-+.Z]+):([0-9a-f]{64}):([A-Za-z0-9_\-+/=]+):([0-9a-f]{16,64})(\|[^ ]*)? -->$`)

// MarkdownSignature is a parsed rye signature line.
type MarkdownSignature struct {
	Time   time.Time
	SHA256 string
	KeyID  string
}

// SignMarkdown prefixes body with a rye signature line. A signature line
// already at the top of body is replaced.
func SignMarkdown(body []byte, signer *Signer, now time.Time) []byte {
	if _, rest, ok := splitSigLine(body); ok {
		body = rest
	}
	out := appendSignatureLine(make([]byte, 0, signatureLineSize+len(body)), body, signer, now)
	return append(out, body...)
}

// signatureLineSize is about the length of a signature line.
const signatureLineSize = 200

// appendSignatureLine appends the signature line (with its newline) that
// SignMarkdown puts before body.
func appendSignatureLine(dst, body []byte, signer *Signer, now time.Time) []byte {
	sum := sha256.Sum256(body)
	var h [2 * sha256.Size]byte
	hex.Encode(h[:], sum[:])
	dst = append(dst, "<!-- rye:signed:"...)
	dst = now.UTC().AppendFormat(dst, time.RFC3339)
	dst = append(dst, ':')
	dst = append(dst, h[:]...)
	dst = append(dst, ':')
	dst = b64.AppendEncode(dst, signer.Sign(h[:]))
	dst = append(dst, ':')
	dst = append(dst, signer.KeyID()...)
	return append(dst, " -->\n"...)
}

func splitSigLine(data []byte) (line, rest []byte, ok bool) {
	i := bytes.IndexByte(data, '\n')
	if i < 0 || !bytes.HasPrefix(data, []byte("<!-- rye:signed:")) {
		return nil, data, false
	}
	return bytes.TrimSuffix(data[:i], []byte{'\r'}), data[i+1:], true
}

// VerifyMarkdown checks a file signed by SignMarkdown (or by the reference
// system with a trusted key) and returns its body without the signature line.
func VerifyMarkdown(data []byte, keyring *Keyring) ([]byte, MarkdownSignature, error) {
	line, body, ok := splitSigLine(data)
	if !ok {
		return nil, MarkdownSignature{}, fmt.Errorf("verify markdown: no <!-- rye:signed:... --> first line")
	}
	m := mdSigLine.FindSubmatch(line)
	if m == nil {
		return nil, MarkdownSignature{}, fmt.Errorf("verify markdown: malformed signature line")
	}
	ms := MarkdownSignature{SHA256: string(m[2]), KeyID: string(m[4])[:16]} // 64-hex fingerprints: ids are their first 16
	ts, err := time.Parse(time.RFC3339, string(m[1]))
	if err != nil {
		return nil, ms, fmt.Errorf("verify markdown: signature time: %w", err)
	}
	ms.Time = ts
	sum := sha256.Sum256(body)
	if hex.EncodeToString(sum[:]) != ms.SHA256 {
		return nil, ms, fmt.Errorf("verify markdown: content hash mismatch: %w", ErrBadSignature)
	}
	sig, err := decodeAnyBase64(string(m[3]))
	if err != nil {
		return nil, ms, fmt.Errorf("verify markdown: signature encoding: %w", err)
	}
	if err := keyring.Verify(ms.KeyID, []byte(ms.SHA256), sig); err != nil {
		return nil, ms, fmt.Errorf("verify markdown: %w", err)
	}
	return body, ms, nil
}

func decodeAnyBase64(s string) ([]byte, error) {
	for _, enc := range []*base64.Encoding{base64.RawURLEncoding, base64.URLEncoding, base64.StdEncoding, base64.RawStdEncoding} {
		if b, err := enc.Strict().DecodeString(s); err == nil {
			return b, nil
		}
	}
	return nil, fmt.Errorf("not base64")
}
