package spooltype

// TenantRuns is what the API answers of a tenant where no admission
// state is kept (GET /v1/tenants/{t} of a server without an admission
// policy): its name and how many runs Redis holds of it.
type TenantRuns struct {
	Tenant string `json:"tenant"`
	Runs   int64  `json:"runs"`
}

// AdmissionState is the body of GET /v1/admission on a server without
// admission state of its own: whether a policy is published, its digest
// and version.
type AdmissionState struct {
	On      bool   `json:"on"`
	Digest  string `json:"digest,omitempty"`
	Version int64  `json:"version,omitempty"`
}
