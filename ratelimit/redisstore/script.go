package redisstore

import (
	"context"
	"crypto/sha1"
	"embed"
	"encoding/hex"

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
	sum := sha1.Sum(b)
	return &script{name: name, src: string(b), sha: hex.EncodeToString(sum[:])}
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

// exec runs the script once. It reports the number of round trips made.
func (sc *script) exec(ctx context.Context, rc rueidis.Client, keys, args []string) (rueidis.RedisResult, int) {
	res := rc.Do(ctx, sc.evalsha(rc, keys, args))
	if isNoScript(res.Error()) {
		return rc.Do(ctx, sc.eval(rc, keys, args)), 2
	}
	return res, 1
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
	var again []int
	for i, r := range res {
		if isNoScript(r.Error()) {
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return res, 1
	}
	cmds = cmds[:0]
	for _, i := range again {
		cmds = append(cmds, sc.eval(rc, calls[i].keys, calls[i].args))
	}
	for j, r := range rc.DoMulti(ctx, cmds...) {
		res[again[j]] = r
	}
	return res, 2
}
