package ledger

import (
	"context"
	"fmt"
)

// Uncharged returns the keys, of those given, that entry id has no charge
// under (in the order given): charges Redis lost, when the keys are of
// turns a durable transcript records. ErrNotFound when the entry does not
// exist. One round trip; it changes nothing.
func (l *Ledger) Uncharged(ctx context.Context, id string, keys []string) ([]string, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	fields := make([]string, 0, len(keys)+1)
	fields = append(fields, "status")
	for _, k := range keys {
		fields = append(fields, "charge:"+k)
	}
	vals, err := l.rdb.HMGet(ctx, l.ks.Ledger(id), fields...).Result()
	if err != nil {
		return nil, fmt.Errorf("charges of %s: %w", id, err)
	}
	if vals[0] == nil {
		return nil, fmt.Errorf("charges of %s: %w", id, ErrNotFound)
	}
	var out []string
	for i, k := range keys {
		if vals[i+1] == nil {
			out = append(out, k)
		}
	}
	return out, nil
}
