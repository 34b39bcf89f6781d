package thread

import (
	"fmt"
	"regexp"
	"time"
)

// Tenants and priorities. A run's tenant is the party its tree runs for,
// and its priority (1 highest .. 5) orders its activations among its
// tenant's: both are set at the root and every descendant, continuation,
// resume, fork and replay has its root's. A run registered before tenants
// existed is DefaultTenant's, at DefaultPriority.
const (
	DefaultTenant   = "default"
	DefaultPriority = 3
	MinPriority     = 1
	MaxPriority     = 5
	// MaxIdempotencyKey is the longest idempotency key, in bytes.
	MaxIdempotencyKey = 255
)

// Admission's refusal codes that tenants, priorities and idempotency keys
// give (the operator's policy adds its own: AdmissionCodes).
const (
	CodeTenantInvalid         = "tenant_invalid"
	CodePriorityInvalid       = "priority_invalid"
	CodeTenantMismatch        = "tenant_mismatch"
	CodePriorityMismatch      = "priority_mismatch"
	CodeTenantForbidden       = "tenant_forbidden"
	CodeTenantNotFound        = "tenant_not_found"
	CodeIdempotencyKeyInvalid = "idempotency_key_invalid"
	CodeIdempotencyKeyReused  = "idempotency_key_reused"
)

// AdmissionCode is how a refusal code is answered: the CLI's exit code and
// the API's HTTP status (a number: package thread does no HTTP).
type AdmissionCode struct {
	Exit, HTTP int
}

// AdmissionCodes are the refusal codes of admission and how each is
// answered. A package that refuses with a code of its own adds it here
// (at init), so the CLI and the API answer it without knowing it.
var AdmissionCodes = map[string]AdmissionCode{
	CodeTenantInvalid:         {2, 400},
	CodePriorityInvalid:       {2, 400},
	CodeTenantMismatch:        {2, 422},
	CodePriorityMismatch:      {2, 422},
	CodeTenantForbidden:       {1, 403},
	CodeTenantNotFound:        {1, 404},
	CodeIdempotencyKeyInvalid: {2, 400},
	CodeIdempotencyKeyReused:  {1, 422},
}

// AdmissionError is a start (or a tenant operation) refused with one of
// AdmissionCodes. Run names the run the refusal is about, when there is
// one (the run an idempotency key belongs to).
type AdmissionError struct {
	Code    string
	Message string
	Run     string
	// RetryAfter is how long until what refused has room again (a
	// tenant ceiling's known reset); 0 when unknown or not a ceiling.
	RetryAfter time.Duration
}

func (e *AdmissionError) Error() string { return e.Code + ": " + e.Message }

// Exit is the CLI's exit code for e: its code's, else 1.
func (e *AdmissionError) Exit() int {
	if c, ok := AdmissionCodes[e.Code]; ok {
		return c.Exit
	}
	return 1
}

// Status is the API's HTTP status for e: its code's, else 422.
func (e *AdmissionError) Status() int {
	if c, ok := AdmissionCodes[e.Code]; ok {
		return c.HTTP
	}
	return 422
}

// Is matches another *AdmissionError with the same code.
func (e *AdmissionError) Is(target error) bool {
	t, ok := target.(*AdmissionError)
	return ok && t.Code == e.Code
}

// Refuse is an *AdmissionError of code with a message.
func Refuse(code, format string, args ...any) *AdmissionError {
	return &AdmissionError{Code: code, Message: fmt.Sprintf(format, args...)}
}

var tenantName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// CheckTenant refuses (tenant_invalid) a tenant name that is not
// [a-z0-9][a-z0-9._-]{0,62}.
func CheckTenant(name string) error {
	if !tenantName.MatchString(name) {
		return Refuse(CodeTenantInvalid, "tenant %q: want 1 to 63 of a-z, 0-9, '.', '_', '-', starting with a letter or digit", name)
	}
	return nil
}

// CheckPriority refuses (priority_invalid) a priority outside 1..5.
func CheckPriority(p int) error {
	if p < MinPriority || p > MaxPriority {
		return Refuse(CodePriorityInvalid, "priority %d: want 1 (highest) to 5", p)
	}
	return nil
}

// CheckIdempotencyKey refuses (idempotency_key_invalid) a key that is
// empty, longer than MaxIdempotencyKey bytes or holds anything but
// printable ASCII without spaces (0x21-0x7E).
func CheckIdempotencyKey(key string) error {
	if key == "" || len(key) > MaxIdempotencyKey {
		return Refuse(CodeIdempotencyKeyInvalid, "idempotency key of %d bytes: want 1 to %d", len(key), MaxIdempotencyKey)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x21 || c > 0x7e {
			return Refuse(CodeIdempotencyKeyInvalid, "idempotency key: byte %d is 0x%02x; want printable ASCII without spaces (0x21-0x7E)", i, c)
		}
	}
	return nil
}

// TenantOrDefault is tenant t, or DefaultTenant for "" (a run registered
// before tenants).
func TenantOrDefault(t string) string {
	if t == "" {
		return DefaultTenant
	}
	return t
}

// PriorityOrDefault is priority p, or DefaultPriority for 0 (a run
// registered before priorities).
func PriorityOrDefault(p int) int {
	if p == 0 {
		return DefaultPriority
	}
	return p
}
