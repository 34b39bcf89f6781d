// Package stack opens the services a spool process runs on: Redis (a URL,
// Sentinel, Cluster, or an embedded server for zero-setup runs) and the blob
// store (S3-compatible storage or a local directory), from flags and SPOOL_*
// environment variables.
package stack

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// OpenRedis returns a client for a spool Redis URL:
//
//	redis://[user:pass@]host:port[/db]
//	rediss://...                                    (TLS)
//	redis-sentinel://[:pass@]host1:port,host2:port/[db]?master=mymaster
//	redis-cluster://[:pass@]host1:port,host2:port
//
// asynq, the registry and the ledger share this one client. Errors never
// hold the URL's password, whatever the URL's form (see RedactURL).
func OpenRedis(rawURL string) (redis.UniversalClient, error) {
	rdb, err := openRedis(rawURL)
	if err != nil {
		return nil, MaskURLError(rawURL, err)
	}
	return rdb, nil
}

func openRedis(rawURL string) (redis.UniversalClient, error) {
	switch {
	case strings.HasPrefix(rawURL, "redis://"), strings.HasPrefix(rawURL, "rediss://"):
		opt, err := redis.ParseURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("redis url: %w", err)
		}
		opt.PoolSize = max(opt.PoolSize, 32)
		return redis.NewClient(opt), nil
	case strings.HasPrefix(rawURL, "redis-sentinel://"):
		u, hosts, pass, db, err := parseMulti(rawURL)
		if err != nil {
			return nil, err
		}
		master := u.Query().Get("master")
		if master == "" {
			return nil, fmt.Errorf("redis url %q: redis-sentinel needs ?master=NAME", RedactURL(rawURL))
		}
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: master, SentinelAddrs: hosts, Password: pass, DB: db, PoolSize: 32,
			SentinelPassword: u.Query().Get("sentinel_password"),
		}), nil
	case strings.HasPrefix(rawURL, "redis-cluster://"):
		_, hosts, pass, _, err := parseMulti(rawURL)
		if err != nil {
			return nil, err
		}
		return newClusterClient(&redis.ClusterOptions{Addrs: hosts, Password: pass, PoolSize: 32}), nil
	case rawURL == "":
		return nil, fmt.Errorf("redis url is empty")
	}
	return nil, fmt.Errorf("redis url %q: scheme must be redis, rediss, redis-sentinel or redis-cluster", RedactURL(rawURL))
}

func parseMulti(raw string) (*url.URL, []string, string, int, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, nil, "", 0, fmt.Errorf("redis url %q: %w", RedactURL(raw), err)
	}
	var hosts []string
	for _, h := range strings.Split(u.Host, ",") {
		if h = strings.TrimSpace(h); h != "" {
			if !strings.Contains(h, ":") {
				h += ":6379"
			}
			hosts = append(hosts, h)
		}
	}
	if len(hosts) == 0 {
		return nil, nil, "", 0, fmt.Errorf("redis url %q: no hosts", RedactURL(raw))
	}
	pass, _ := u.User.Password()
	db := 0
	if p := strings.Trim(u.Path, "/"); p != "" {
		if db, err = strconv.Atoi(p); err != nil {
			return nil, nil, "", 0, fmt.Errorf("redis url %q: db %q is not a number", RedactURL(raw), p)
		}
	}
	return u, hosts, pass, db, nil
}
