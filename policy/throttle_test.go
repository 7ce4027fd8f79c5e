package policy

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

const throttleCfg = `{"limit":[1],"window_size":[10],"namespace":"n","identifier":"ip","disable_penalty":true,` +
	`"throttling":{"enabled":true,"interval":5,"retry_times":5,"queue_limit":1}}`

// The waiting room runs on synctest's fake clock: Request.Now is the fake
// now, so the retries' decision times advance with it.
func fakeNow() time.Time { return time.Now() }

// A request over the limit waits and is admitted by the retry that falls in
// the next window.
func TestThrottleAdmittedAfterRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newAdvanced(t, newRegistry(t, RegistryOptions{}), throttleCfg)
		// Align to a window start so the numbers are exact.
		start := time.Now()
		time.Sleep(time.Until(start.Truncate(10 * time.Second).Add(10 * time.Second)))
		r := Request{ClientIP: "1.1.1.1", Now: fakeNow()}
		if res, _ := a.Check(context.Background(), &r); !res.Allowed {
			t.Fatal("first request rejected")
		}
		begin := time.Now()
		r.Now = fakeNow()
		res, err := a.Check(context.Background(), &r)
		if err != nil {
			t.Fatal(err)
		}
		// Retries (rejections are not counted: disable_penalty): +5 s rate
		// 2; +10 s (next window) 1 + 1*1 = 2; +15 s 1 + 1*0.5 = 1.5; +20 s
		// the previous window is empty: rate 1, admitted.
		if !res.Allowed || res.Retries != 4 {
			t.Fatalf("result %+v, want admitted by the 4th retry", res)
		}
		if waited := time.Since(begin); waited != 20*time.Second {
			t.Errorf("waited %s, want 20s", waited)
		}
		if _, ok := hdr(res, "Retry-After"); ok {
			t.Errorf("admitted result has Retry-After")
		}
	})
}

// With a full room the request is rejected at once.
func TestThrottleRejectedWhenFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newAdvanced(t, newRegistry(t, RegistryOptions{}),
			`{"limit":[1],"window_size":[3600],"namespace":"n","identifier":"ip","throttling":{"enabled":true,"interval":1,"retry_times":5,"queue_limit":1}}`)
		r := Request{ClientIP: "1.1.1.1", Now: fakeNow()}
		if res, _ := a.Check(context.Background(), &r); !res.Allowed {
			t.Fatal("first request rejected")
		}
		var wg sync.WaitGroup
		var waiting Result
		wg.Go(func() {
			r := Request{ClientIP: "1.1.1.1", Now: fakeNow()}
			waiting, _ = a.Check(context.Background(), &r)
		})
		synctest.Wait() // the first denied request now holds the room
		begin := time.Now()
		r.Now = fakeNow()
		res, err := a.Check(context.Background(), &r)
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed || res.Retries != 0 || time.Since(begin) != 0 {
			t.Errorf("second waiting request: %+v after %s, want an immediate rejection", res, time.Since(begin))
		}
		wg.Wait()
		if waiting.Allowed || waiting.Retries != 5 || waiting.Status != 429 {
			t.Errorf("waiting request: %+v, want rejected after 5 retries", waiting)
		}
		// The room is free again.
		r.Now = fakeNow()
		if res, _ := a.Check(context.Background(), &r); res.Retries != 5 {
			t.Errorf("after the room emptied: %d retries, want 5", res.Retries)
		}
	})
}

// Retries exhausted: rejected with the last attempt's headers after
// interval*retry_times; a cancelled context abandons at once.
func TestThrottleExhaustedAndCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newAdvanced(t, newRegistry(t, RegistryOptions{}),
			`{"limit":[1],"window_size":[3600],"window_type":"fixed","namespace":"n","identifier":"ip","throttling":{"enabled":true,"interval":2,"retry_times":3,"queue_limit":5}}`)
		r := Request{ClientIP: "1.1.1.1", Now: fakeNow()}
		a.Check(context.Background(), &r)
		begin := time.Now()
		r.Now = fakeNow()
		res, err := a.Check(context.Background(), &r)
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed || res.Retries != 3 || time.Since(begin) != 6*time.Second {
			t.Errorf("result %+v after %s, want rejected after 3 retries and 6 s", res, time.Since(begin))
		}
		if v, _ := hdr(res, "Retry-After"); v == "" {
			t.Errorf("rejection without Retry-After: %v", res.Headers)
		}

		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() {
			r := Request{ClientIP: "1.1.1.1", Now: fakeNow()}
			_, err := a.Check(ctx, &r)
			done <- err
		}()
		time.Sleep(3 * time.Second)
		begin = time.Now()
		cancel()
		if err := <-done; err == nil || time.Since(begin) != 0 {
			t.Errorf("cancelled wait: err %v after %s, want an error at once", err, time.Since(begin))
		}
		// Its lease was released: a full room of 5 is available again.
		var wg sync.WaitGroup
		for range 5 {
			wg.Go(func() {
				r := Request{ClientIP: "1.1.1.1", Now: fakeNow()}
				if res, _ := a.Check(context.Background(), &r); res.Retries != 3 {
					t.Errorf("waiting request %d retries, want 3", res.Retries)
				}
			})
		}
		wg.Wait()
	})
}

func TestLeaseTTLCapped(t *testing.T) {
	if got := leaseTTL(4*time.Second, 2); got != 12*time.Second {
		t.Errorf("leaseTTL(4s, 2) = %s, want 12s", got)
	}
	if got := leaseTTL(1_000_000*time.Second, 1_000_000); got != maxLeaseTTL {
		t.Errorf("leaseTTL at Kong's maxima = %s, want the cap", got)
	}
}
