package redisstore

import (
	"context"
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"errors"
	"io"
	"syscall"

	"github.com/redis/rueidis"
)

//go:embed lua/*.lua
var luaFS embed.FS

var (
	takeScript    = mustScript("lua/take.lua")
	syncScript    = mustScript("lua/sync.lua")
	acquireScript = mustScript("lua/acquire.lua")
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

// exec runs the script once. It reports the number of round trips made.
func (sc *script) exec(ctx context.Context, rc rueidis.Client, keys, args []string) (rueidis.RedisResult, int) {
	res := rc.Do(ctx, sc.evalsha(rc, keys, args))
	trips := 1
	if staleConn(res.Error()) {
		res = rc.Do(ctx, sc.evalsha(rc, keys, args))
		trips++
	}
	if isNoScript(res.Error()) {
		return rc.Do(ctx, sc.eval(rc, keys, args)), trips + 1
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
	cmds := make(rueidis.Commands, len(calls))
	for i, c := range calls {
		cmds[i] = sc.evalsha(rc, c.keys, c.args)
	}
	res := rc.DoMulti(ctx, cmds...)
	trips := 1
	if len(res) > 0 && staleConn(res[0].Error()) {
		res = rc.DoMulti(ctx, cmds...)
		trips++
	}
	var again []int
	for i, r := range res {
		if isNoScript(r.Error()) {
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return res, trips
	}
	cmds = cmds[:0]
	for _, i := range again {
		cmds = append(cmds, sc.eval(rc, calls[i].keys, calls[i].args))
	}
	for j, r := range rc.DoMulti(ctx, cmds...) {
		res[again[j]] = r
	}
	return res, trips + 1
}
