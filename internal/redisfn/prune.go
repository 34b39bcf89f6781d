package redisfn

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/keyspace"
)

// Prefix starts the name of every library New makes: Prune's prefix for
// all of spool's.
const Prefix = "spool_"

// Prune deletes the Function libraries whose names start with prefix that
// no process has used for unused, as keyspace.FunctionsSeen records
// (Run's touch), on c's server or every master of a Cluster, and returns
// their names, sorted. A library the record does not name (loaded by a
// version from before the record, or the record was lost; or not a time) is entered as
// seen now, so it goes after unused too; a record whose library is gone
// is dropped after unused. A process still using a library Prune deletes
// loses nothing: its next call loads the library again (Run). A server
// without Functions has nothing to prune.
func Prune(ctx context.Context, c redis.UniversalClient, prefix string, unused time.Duration, now time.Time) ([]string, error) {
	if unused <= 0 {
		return nil, fmt.Errorf("prune functions: unused %s: must be positive", unused)
	}
	libs, err := listLibraries(ctx, c, prefix)
	if err != nil {
		if unknownCommand(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("prune functions: list: %w", err)
	}
	seen, err := c.HGetAll(ctx, keyspace.FunctionsSeen).Result()
	if err != nil {
		return nil, fmt.Errorf("prune functions: %w", err)
	}
	cutoff := now.Add(-unused).Unix()
	stale := staleRecords(seen, libs, prefix, cutoff) // records to drop
	var deleted []string                              // libraries deleted
	for name := range libs {
		t, err := strconv.ParseInt(seen[name], 10, 64)
		if err != nil { // no record (or not a time): seen now
			if err := c.HSet(ctx, keyspace.FunctionsSeen, name, now.Unix()).Err(); err != nil {
				return nil, fmt.Errorf("prune functions: %w", err)
			}
			continue
		}
		if t >= cutoff {
			continue
		}
		if err := deleteLibrary(ctx, c, name); err != nil {
			return deleted, fmt.Errorf("prune functions: delete %s: %w", name, err)
		}
		deleted = append(deleted, name)
		stale = append(stale, name)
	}
	if len(stale) > 0 {
		if err := c.HDel(ctx, keyspace.FunctionsSeen, stale...).Err(); err != nil {
			return deleted, fmt.Errorf("prune functions: %w", err)
		}
	}
	slices.Sort(deleted)
	return deleted, nil
}

// listLibraries is the set of the Function libraries whose names start
// with prefix on c's server, or on any master of a Cluster.
func listLibraries(ctx context.Context, c redis.UniversalClient, prefix string) (map[string]bool, error) {
	var (
		mu   sync.Mutex
		libs = map[string]bool{}
	)
	err := eachServer(ctx, c, func(ctx context.Context, m redis.Cmdable) error {
		ls, err := m.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: prefix + "*"}).Result()
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for _, l := range ls {
			libs[l.Name] = true
		}
		return nil
	})
	return libs, err
}

// staleRecords are the names in seen (library name to the Unix time it
// was last used) of the libraries with prefix that are gone (not among
// libs) and whose record is older than cutoff, or not a time: records to
// drop.
func staleRecords(seen map[string]string, libs map[string]bool, prefix string, cutoff int64) []string {
	var stale []string
	for name, at := range seen {
		if t, err := strconv.ParseInt(at, 10, 64); strings.HasPrefix(name, prefix) && !libs[name] && (err != nil || t < cutoff) {
			stale = append(stale, name)
		}
	}
	return stale
}

// deleteLibrary deletes the library name from c's server, or from every
// master of a Cluster; a server that no longer has it is fine.
func deleteLibrary(ctx context.Context, c redis.UniversalClient, name string) error {
	return eachServer(ctx, c, func(ctx context.Context, m redis.Cmdable) error {
		if err := m.FunctionDelete(ctx, name).Err(); err != nil && !strings.Contains(err.Error(), "not found") {
			return err
		}
		return nil
	})
}
