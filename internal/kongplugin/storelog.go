package kongplugin

import (
	"sync"

	"github.com/Kong/go-pdk"

	"github.com/seed-008287da/sluice/ratelimit/redisstore"
)

// maxStoreEvents bounds the state changes kept for the next request's log;
// beyond it the oldest are dropped (a flapping Redis with no traffic).
const maxStoreEvents = 64

// storeEvent is one Redis state change waiting to be written with
// kong.log, which only a request's PDK can reach.
type storeEvent struct {
	level string // "err", "warn" or "notice"
	msg   string
}

// storeLog queues the Redis state changes of the Process's registry until
// a request writes them to Kong's error log.
type storeLog struct {
	mu     sync.Mutex
	events []storeEvent
}

// changed is the registry's OnRedisState: one line per state change, an
// error naming the setting for a configuration fault. It never blocks.
func (l *storeLog) changed(namespace string, degraded bool, err error) {
	var e storeEvent
	switch f := redisstore.Classify(err); {
	case !degraded:
		e = storeEvent{"notice", "sluice: redis available again, namespace " + namespace + " counts in redis"}
	case f != nil:
		e = storeEvent{"err", "sluice: redis refuses the configuration (" + f.Reason + ", check config.redis." + f.Setting +
			"), namespace " + namespace + " counts locally on this node: " + f.Err.Error()}
	default:
		msg := "sluice: redis unavailable, namespace " + namespace + " counts locally on this node"
		if err != nil {
			msg += ": " + err.Error()
		}
		e = storeEvent{"warn", msg}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.events) == maxStoreEvents {
		l.events = append(l.events[:0], l.events[1:]...)
	}
	l.events = append(l.events, e)
}

// flush writes the queued changes through kong.log; with none queued it
// costs no round trip.
func (l *storeLog) flush(kong *pdk.PDK) {
	l.mu.Lock()
	events := l.events
	l.events = nil
	l.mu.Unlock()
	for _, e := range events {
		switch e.level {
		case "err":
			_ = kong.Log.Err(e.msg)
		case "warn":
			_ = kong.Log.Warn(e.msg)
		default:
			_ = kong.Log.Notice(e.msg)
		}
	}
}
