package spooltype

// CostRow is one group of a cost report: the runs whose key (their
// directive, model, tenant, a tag's value or their UTC day) is Key, and
// what they spent. Spend is USD, exact to the nano-dollar the ledger
// charges in.
type CostRow struct {
	Key          string  `json:"key"`
	Spend        float64 `json:"spend"`
	Runs         int     `json:"runs"`
	InputTokens  int     `json:"input_tokens"`
	OutputTokens int     `json:"output_tokens"`
}

// CostReport is `spool cost report --json` and GET /v1/cost: the rows,
// most spend first, and their total (Key "total").
type CostReport struct {
	By    string    `json:"by"`
	Rows  []CostRow `json:"rows"`
	Total CostRow   `json:"total"`
}
