package redisstore

import (
	"context"
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"errors"
	"io"
	"syscall"
	"time"

	"github.com/redis/rueidis"
)

//go:embed lua/*.lua
var luaFS embed.FS

var (
	takeScript    = mustScript("lua/take.lua")
	syncScript    = mustScript("lua/sync.lua")
	acquireScript = mustScript("lua/acquire.lua")
	journalScript = mustScript("lua/journal.lua")
)

// A script is one embedded Lua file, run EVALSHA first and EVAL when the
// server does not know it yet (after a restart or a failover), as go-redis'
// Script.Run does.
type script struct {
	name string
	src  string
	sha  string
}

// mustScript loads an embedded file. The files are part of the binary, so
// a failure here is a build defect, found by any test.
func mustScript(name string) *script {
	b, err := luaFS.ReadFile(name)
	if err != nil {
		panic("redisstore: missing embedded " + name)
	}
	return newScript(name, string(b))
}

func newScript(name, src string) *script {
	sum := sha1.Sum([]byte(src))
	return &script{name: name, src: src, sha: hex.EncodeToString(sum[:])}
}

func (sc *script) evalsha(rc rueidis.Client, keys, args []string) rueidis.Completed {
	return rc.B().Evalsha().Sha1(sc.sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
}

func (sc *script) eval(rc rueidis.Client, keys, args []string) rueidis.Completed {
	return rc.B().Eval().Script(sc.src).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
}

func isNoScript(err error) bool {
	e, ok := rueidis.IsRedisErr(err)
	return ok && e.IsNoScript()
}

// staleConn reports an error of a connection that died before the call
// (the server restarted or failed over since it was used): the command
// never ran, so it is safe to send once more on a fresh connection.
func staleConn(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// maxStale is how many times a call is resent after meeting a dead
// connection. The client replaces a dead connection asynchronously, so each
// resend first waits a little longer (1, 2, 4, 8 ms), within the call's
// deadline.
const maxStale = 4

// staleWait waits before resend attempt n (1-based), or reports false when
// ctx ends first.
func staleWait(ctx context.Context, n int) bool {
	t := time.NewTimer(time.Millisecond << (n - 1))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// exec runs the script once. It reports the number of round trips made.
func (sc *script) exec(ctx context.Context, rc rueidis.Client, keys, args []string) (rueidis.RedisResult, int) {
	res, trips := do(ctx, rc, func() rueidis.Completed { return sc.evalsha(rc, keys, args) })
	if isNoScript(res.Error()) {
		var more int
		res, more = do(ctx, rc, func() rueidis.Completed { return sc.eval(rc, keys, args) })
		trips += more
	}
	return res, trips
}

// do sends one command, again on a fresh connection when it met a dead
// one. build makes the command anew for each send: sent commands are
// recycled by the client.
func do(ctx context.Context, rc rueidis.Client, build func() rueidis.Completed) (rueidis.RedisResult, int) {
	res := rc.Do(ctx, build())
	trips := 1
	for trips <= maxStale && staleConn(res.Error()) && staleWait(ctx, trips) {
		res = rc.Do(ctx, build())
		trips++
	}
	return res, trips
}

// call is one execution of a script in a pipeline.
type call struct {
	keys, args []string
}

// execMulti runs the script once per call in one pipeline (split by slot
// on Cluster), and runs again with EVAL those that met a server without
// the script. It reports the number of pipelines sent.
func (sc *script) execMulti(ctx context.Context, rc rueidis.Client, calls []call) ([]rueidis.RedisResult, int) {
	res, trips := doMulti(ctx, rc, len(calls), func(i int) rueidis.Completed { return sc.evalsha(rc, calls[i].keys, calls[i].args) })
	return res, trips + sc.rerunNoScript(ctx, rc, calls, res)
}

// rerunNoScript sends again with EVAL, in one pipeline, the calls whose
// EVALSHA in res met a server without the script, and puts their results
// in res. It reports the number of pipelines sent.
func (sc *script) rerunNoScript(ctx context.Context, rc rueidis.Client, calls []call, res []rueidis.RedisResult) int {
	var again []int
	for i, r := range res {
		if isNoScript(r.Error()) {
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return 0
	}
	more, n := doMulti(ctx, rc, len(again), func(j int) rueidis.Completed {
		c := calls[again[j]]
		return sc.eval(rc, c.keys, c.args)
	})
	for j, r := range more {
		res[again[j]] = r
	}
	return n
}

// doMultiInto is doMulti, but a lone command is sent with Do and its
// result put in one: rueidis' DoMulti allocates its results, Do does not.
func doMultiInto(ctx context.Context, rc rueidis.Client, one *[1]rueidis.RedisResult, n int, build func(i int) rueidis.Completed) ([]rueidis.RedisResult, int) {
	if n != 1 {
		return doMulti(ctx, rc, n, build)
	}
	res, trips := do(ctx, rc, func() rueidis.Completed { return build(0) })
	one[0] = res
	return one[:], trips
}

// doMulti sends n commands in one pipeline, and again, on a fresh
// connection, those that met a dead one. Only those: on Cluster a pipeline
// is split by shard, and the commands of the other shards have run.
func doMulti(ctx context.Context, rc rueidis.Client, n int, build func(i int) rueidis.Completed) ([]rueidis.RedisResult, int) {
	cmds := make(rueidis.Commands, n)
	for i := range cmds {
		cmds[i] = build(i)
	}
	res := rc.DoMulti(ctx, cmds...)
	trips := 1
	for trips <= maxStale {
		var again []int
		for i, r := range res {
			if staleConn(r.Error()) {
				again = append(again, i)
			}
		}
		if len(again) == 0 || !staleWait(ctx, trips) {
			break
		}
		retry := make(rueidis.Commands, len(again))
		for j, i := range again {
			retry[j] = build(i)
		}
		for j, r := range rc.DoMulti(ctx, retry...) {
			res[again[j]] = r
		}
		trips++
	}
	return res, trips
}
