package gateway

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// access runs one plugin's access phase and records its outcome: the
// decision metric and latency, store errors, and a span when tracing.
func (g *Gateway) access(x *Exchange, in *instance) error {
	t0 := time.Since(g.base)
	n := len(x.plugins)
	var span trace.Span
	parent := x.Context
	if tr := g.opts.Tracer; tr != nil {
		var ctx context.Context
		ctx, span = tr.Start(x.Context, "sluice.plugin "+in.entity.Name, trace.WithAttributes(
			attribute.String("sluice.plugin", in.entity.Name),
			attribute.String("sluice.plugin.id", in.entity.ID),
			attribute.String("sluice.route", x.Route.Name),
		))
		x.Context = ctx
	}
	nerr := len(x.storeErrs)
	err := in.plugin.Access(x)
	for _, se := range x.storeErrs[nerr:] {
		g.metrics.storeErrors.WithLabelValues(in.entity.Name).Inc()
		g.repeats.Warn("store "+in.entity.ID, "counter store failed", "plugin", in.entity.Name, "plugin_id", in.entity.ID,
			"request_id", x.RequestID(), "error", se.Error())
	}
	in.latency.Observe((time.Since(g.base) - t0).Seconds())
	outcome := "allowed"
	if x.responded {
		outcome = "denied"
	}
	if len(x.plugins) > n {
		outcome = x.plugins[len(x.plugins)-1].outcome
	} else {
		x.plugins = append(x.plugins, pluginOutcome{in.entity.Name, outcome})
	}
	if err != nil {
		outcome = "error"
	}
	in.decision(g.metrics, outcome).Inc()
	if outcome == "denied" && in.limiter {
		var w time.Duration
		if x.denial.plugin == in.entity.Name {
			w = x.denial.window
		}
		in.denied(g.metrics, w).Inc()
	}
	if span != nil {
		span.SetAttributes(attribute.String("sluice.outcome", outcome))
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
		x.Context = parent // the next plugin's span is a sibling, not a child
	}
	return err
}
