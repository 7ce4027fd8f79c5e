package bench

import (
	"bufio"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// RedisCounters is what INFO says about the work a server has done.
type RedisCounters struct {
	Calls   int64 // commands executed, those run inside scripts included, INFO excluded
	Scripts int64 // EVAL, EVALSHA and FCALL calls
	Reads   int64 // read events processed on client sockets
}

var scriptCommands = []string{"cmdstat_eval", "cmdstat_evalsha", "cmdstat_eval_ro", "cmdstat_evalsha_ro", "cmdstat_fcall", "cmdstat_fcall_ro"}

// ReadRedisCounters reads INFO commandstats and stats.
func ReadRedisCounters(ctx context.Context, rdb *redis.Client) (RedisCounters, error) {
	s, err := rdb.Info(ctx, "commandstats", "stats").Result()
	if err != nil {
		return RedisCounters{}, fmt.Errorf("bench: reading INFO: %w", err)
	}
	var c RedisCounters
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "cmdstat_") && !strings.HasPrefix(line, "cmdstat_info:"):
			// cmdstat_evalsha:calls=12,usec=...
			_, rest, _ := strings.Cut(line, ":calls=")
			num, _, _ := strings.Cut(rest, ",")
			n, err := strconv.ParseInt(num, 10, 64)
			if err != nil {
				return RedisCounters{}, fmt.Errorf("bench: parsing INFO line %q: %w", line, err)
			}
			c.Calls += n
			if name, _, _ := strings.Cut(line, ":"); slices.Contains(scriptCommands, name) {
				c.Scripts += n
			}
		case strings.HasPrefix(line, "total_reads_processed:"):
			n, err := strconv.ParseInt(strings.TrimPrefix(line, "total_reads_processed:"), 10, 64)
			if err != nil {
				return RedisCounters{}, fmt.Errorf("bench: parsing INFO line %q: %w", line, err)
			}
			c.Reads = n
		}
	}
	return c, nil
}
