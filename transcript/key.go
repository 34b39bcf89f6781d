package transcript

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// ErrUnknownKey is returned when a signature names a key id the keyring does
// not trust.
var ErrUnknownKey = errors.New("signing key not trusted")

// ErrBadSignature is returned when a signature does not verify.
var ErrBadSignature = errors.New("signature does not verify")

// SigningKeyFile is the private key's file name inside a key directory.
const SigningKeyFile = "signing.key"

// KeyID returns the id of a public key: the first 16 hex digits of the
// SHA-256 of its PKIX PEM encoding (the reference system's PUBKEY_FP).
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(publicPEM(pub))
	return hex.EncodeToString(sum[:])[:16]
}

func publicPEM(pub ed25519.PublicKey) []byte {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil { // only for a malformed key length
		panic(fmt.Sprintf("transcript: marshal ed25519 public key: %v", err))
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// Signer holds an Ed25519 private key. It is safe for concurrent use.
type Signer struct {
	priv   ed25519.PrivateKey
	id     string
	signed atomic.Int64
}

// GenerateKey makes a new Ed25519 key pair.
func GenerateKey() (*Signer, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate ed25519 key: %w", err)
	}
	return NewSigner(priv), nil
}

// NewSigner wraps an existing private key.
func NewSigner(priv ed25519.PrivateKey) *Signer {
	return &Signer{priv: priv, id: KeyID(priv.Public().(ed25519.PublicKey))}
}

// KeyID is the id of the signer's public key.
func (s *Signer) KeyID() string { return s.id }

// PublicKey returns the public half.
func (s *Signer) PublicKey() ed25519.PublicKey { return s.priv.Public().(ed25519.PublicKey) }

// Sign signs msg.
func (s *Signer) Sign(msg []byte) []byte {
	s.signed.Add(1)
	return ed25519.Sign(s.priv, msg)
}

// Signatures is how many signatures the signer has made.
func (s *Signer) Signatures() int64 { return s.signed.Load() }

// SaveKey writes the private key to dir/signing.key (PKCS#8 PEM, mode 0600,
// replacing an older key: that is rotation) and the public key to
// dir/<key id>.pub (PKIX PEM), where LoadKeyring finds it; public keys of
// earlier keys stay, so what they signed keeps verifying. It returns both
// paths.
func (s *Signer) SaveKey(dir string) (privPath, pubPath string, err error) {
	return s.SaveKeyFile(filepath.Join(dir, SigningKeyFile))
}

// SaveKeyFile is SaveKey with the private key at path (any name, as
// SPOOL_SIGNING_KEY may give it) and the public key beside it.
func (s *Signer) SaveKeyFile(path string) (privPath, pubPath string, err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", fmt.Errorf("save key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(s.priv)
	if err != nil {
		return "", "", fmt.Errorf("save key: %w", err)
	}
	if pubPath, err = s.SavePublicKey(dir); err != nil {
		return "", "", err
	}
	if err := writeFileAtomic(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return "", "", fmt.Errorf("save key: %w", err)
	}
	return path, pubPath, nil
}

// SavePublicKey writes the public key to dir/<keyid>.pub (PEM), creating
// dir, and returns the file's path: what a reader's keyring trusts
// (LoadKeyring, SPOOL_TRUSTED_KEYS).
func (s *Signer) SavePublicKey(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("save public key: %w", err)
	}
	path := filepath.Join(dir, s.id+".pub")
	if err := writeFileAtomic(path, publicPEM(s.PublicKey()), 0o644); err != nil {
		return "", fmt.Errorf("save public key: %w", err)
	}
	return path, nil
}

func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	cherr := f.Chmod(perm)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, cherr, serr, cerr); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

// LoadKey reads a private key. path is a file, or a directory holding
// signing.key (SPOOL_SIGNING_KEY may name either). Accepted encodings: PEM
// "PRIVATE KEY" (PKCS#8), or a raw 32-byte seed or 64-byte private key.
func LoadKey(path string) (*Signer, error) {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		path = filepath.Join(path, SigningKeyFile)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load signing key: %w", err)
	}
	priv, err := parsePrivateKey(data)
	if err != nil {
		return nil, fmt.Errorf("load signing key %s: %w", path, err)
	}
	return NewSigner(priv), nil
}

func parsePrivateKey(data []byte) (ed25519.PrivateKey, error) {
	if blk, _ := pem.Decode(data); blk != nil {
		return parseDER[ed25519.PrivateKey](blk.Bytes, x509.ParsePKCS8PrivateKey)
	}
	switch len(data) {
	case ed25519.SeedSize:
		return ed25519.NewKeyFromSeed(data), nil
	case ed25519.PrivateKeySize:
		priv := ed25519.PrivateKey(append([]byte(nil), data...))
		if !priv.Public().(ed25519.PublicKey).Equal(ed25519.NewKeyFromSeed(priv.Seed()).Public()) {
			return nil, fmt.Errorf("raw 64-byte key: public half does not match the seed")
		}
		return priv, nil
	}
	return nil, fmt.Errorf("not a PEM PRIVATE KEY nor a raw %d/%d-byte Ed25519 key (%d bytes)", ed25519.SeedSize, ed25519.PrivateKeySize, len(data))
}

// ParsePublicKey reads a PEM "PUBLIC KEY" (PKIX) or a raw 32-byte key.
func ParsePublicKey(data []byte) (ed25519.PublicKey, error) {
	if blk, _ := pem.Decode(data); blk != nil {
		return parseDER[ed25519.PublicKey](blk.Bytes, x509.ParsePKIXPublicKey)
	}
	if len(data) == ed25519.PublicKeySize {
		return ed25519.PublicKey(append([]byte(nil), data...)), nil
	}
	return nil, fmt.Errorf("not a PEM PUBLIC KEY nor a raw 32-byte Ed25519 key (%d bytes)", len(data))
}

// parseDER parses a PEM block's DER bytes with parse (PKCS #8 or PKIX) and
// returns the key if it is an Ed25519 key of type K.
func parseDER[K ed25519.PrivateKey | ed25519.PublicKey](der []byte, parse func([]byte) (any, error)) (K, error) {
	k, err := parse(der)
	if err != nil {
		return nil, err
	}
	key, ok := k.(K)
	if !ok {
		return nil, fmt.Errorf("not an Ed25519 key (%T)", k)
	}
	return key, nil
}

// Keyring is the set of trusted public keys, by key id. Verification accepts
// a signature by any of them, so keys can rotate. Safe for concurrent use.
type Keyring struct {
	mu   sync.RWMutex
	keys map[string]ed25519.PublicKey
	// unverified: no key to check against; Verify accepts every
	// signature (see UnverifiedKeyring).
	unverified bool
}

// UnverifiedKeyring returns a keyring that trusts no key and checks no
// signature: Verify accepts every one. It is for readers that were given
// no public key (a monitor, `thread list`), so that they still show
// transcripts and records, whose hash chains, sequence and marks are still
// checked, marked "unverified" wherever a verification would have been
// shown (see Unverified). Nothing that writes or resumes from a transcript
// may use it.
func UnverifiedKeyring() *Keyring {
	return &Keyring{keys: map[string]ed25519.PublicKey{}, unverified: true}
}

// Unverified reports whether k checks no signature (UnverifiedKeyring).
func (k *Keyring) Unverified() bool { return k != nil && k.unverified }

// NewKeyring returns a keyring trusting pubs.
func NewKeyring(pubs ...ed25519.PublicKey) *Keyring {
	k := &Keyring{keys: map[string]ed25519.PublicKey{}}
	for _, p := range pubs {
		k.Add(p)
	}
	return k
}

// Add trusts pub and returns its key id.
func (k *Keyring) Add(pub ed25519.PublicKey) string {
	id := KeyID(pub)
	k.mu.Lock()
	k.keys[id] = append(ed25519.PublicKey(nil), pub...)
	k.mu.Unlock()
	return id
}

// Remove stops trusting a key id.
func (k *Keyring) Remove(keyID string) {
	k.mu.Lock()
	delete(k.keys, keyID)
	k.mu.Unlock()
}

// IDs lists the trusted key ids, sorted.
func (k *Keyring) IDs() []string {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return slices.Sorted(maps.Keys(k.keys))
}

// Verify checks sig over msg with the key keyID names.
func (k *Keyring) Verify(keyID string, msg, sig []byte) error {
	if k == nil {
		return fmt.Errorf("key %s: %w (no keyring)", keyID, ErrUnknownKey)
	}
	if k.unverified {
		return nil
	}
	k.mu.RLock()
	pub, ok := k.keys[keyID]
	k.mu.RUnlock()
	if !ok {
		return fmt.Errorf("key %s: %w", keyID, ErrUnknownKey)
	}
	if len(sig) != ed25519.SignatureSize || !ed25519.Verify(pub, msg, sig) {
		return fmt.Errorf("key %s: %w", keyID, ErrBadSignature)
	}
	return nil
}

// LoadKeyring trusts every *.pub file in dir plus the public halves of
// signers (normally the process's own signing key). A missing dir is fine
// when signers are given.
func LoadKeyring(dir string, signers ...*Signer) (*Keyring, error) {
	k := NewKeyring()
	for _, s := range signers {
		k.Add(s.PublicKey())
	}
	if dir != "" {
		ents, err := os.ReadDir(dir)
		// No key directory is fine when signers were given.
		if missingOK := errors.Is(err, os.ErrNotExist) && len(signers) > 0; err != nil && !missingOK {
			return nil, fmt.Errorf("load keyring: %w", err)
		}
		for _, e := range ents {
			if e.IsDir() || !strings.HasSuffix(e.Name(), ".pub") {
				continue
			}
			data, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				return nil, fmt.Errorf("load keyring: %w", err)
			}
			pub, err := ParsePublicKey(data)
			if err != nil {
				return nil, fmt.Errorf("load keyring %s: %w", e.Name(), err)
			}
			k.Add(pub)
		}
	}
	if len(k.IDs()) == 0 {
		return nil, fmt.Errorf("load keyring %s: %w", dir, ErrNoTrustedKeys)
	}
	return k, nil
}

// ErrNoTrustedKeys is LoadKeyring's error when it found no key to trust.
var ErrNoTrustedKeys = errors.New("no trusted public keys (*.pub)")

// Merge adds every key other trusts to k.
func (k *Keyring) Merge(other *Keyring) {
	other.mu.RLock()
	pubs := make([]ed25519.PublicKey, 0, len(other.keys))
	for _, p := range other.keys {
		pubs = append(pubs, p)
	}
	other.mu.RUnlock()
	for _, p := range pubs {
		k.Add(p)
	}
}

// InitKeys makes a signing key pair in dir (dir/signing.key and
// dir/<keyid>.pub), unless a key is already there, which it loads and
// returns with created=false; force replaces it (rotation: keep the old .pub
// files trusted to verify old transcripts).
func InitKeys(dir string, force bool) (signer *Signer, created bool, err error) {
	return InitKeyFile(filepath.Join(dir, SigningKeyFile), force)
}

// InitKeyFile is InitKeys with the private key at path and the public key
// beside it (SaveKeyFile).
func InitKeyFile(path string, force bool) (signer *Signer, created bool, err error) {
	if !force {
		if _, err := os.Stat(path); err == nil {
			s, err := LoadKey(path)
			return s, false, err
		}
	}
	s, err := GenerateKey()
	if err != nil {
		return nil, false, err
	}
	if _, _, err := s.SaveKeyFile(path); err != nil {
		return nil, false, err
	}
	return s, true, nil
}
