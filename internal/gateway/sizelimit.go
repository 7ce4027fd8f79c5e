package gateway

import (
	"encoding/json"
	"strings"

	"github.com/seed-008287da/sluice/internal/gateway/kongconf"
	"github.com/seed-008287da/sluice/policy/field"
)

// PriorityRequestSizeLimiting is Kong's request-size-limiting PRIORITY.
const PriorityRequestSizeLimiting = 951

// requestSizeLimiting is Kong's request-size-limiting plugin: a body
// larger than allowed_payload_size (in size_unit: megabytes of 2^20
// bytes by default, kilobytes of 2^10, bytes) gets 413 "Request size
// limit exceeded" (417 when the client sent Expect: 100-continue). A
// Content-Length is checked before the body is read; a chunked body is
// counted while it streams upstream, and the 413 comes when it passes the
// limit. With require_content_length, a request with neither
// Content-Length nor chunked encoding gets 411.
type requestSizeLimiting struct {
	limit      int64
	requireLen bool
}

type requestSizeLimitingConfig struct {
	AllowedPayloadSize   *json.Number `json:"allowed_payload_size"`
	SizeUnit             *string      `json:"size_unit"`
	RequireContentLength bool         `json:"require_content_length"`
}

var sizeUnits = map[string]int64{"megabytes": 1 << 20, "kilobytes": 1 << 10, "bytes": 1}

func newRequestSizeLimiting(raw json.RawMessage, env *BuildEnv) (Plugin, error) {
	var c requestSizeLimitingConfig
	if err := decodeStrict(raw, &c); err != nil {
		return nil, err
	}
	var errs kongconf.Errors
	size, unit := int64(128), "megabytes"
	if c.AllowedPayloadSize != nil {
		n, err := c.AllowedPayloadSize.Int64()
		if err != nil {
			errs = append(errs, field.Error{Path: "config.allowed_payload_size", Message: "expected an integer"})
		} else if n < 0 {
			errs = append(errs, field.Error{Path: "config.allowed_payload_size", Message: "value must be greater than or equal to 0"})
		}
		size = n
	}
	if c.SizeUnit != nil {
		unit = *c.SizeUnit
		if _, ok := sizeUnits[unit]; !ok {
			errs = append(errs, field.Error{Path: "config.size_unit", Message: "expected one of: megabytes, kilobytes, bytes"})
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return &requestSizeLimiting{limit: size * sizeUnits[unit], requireLen: c.RequireContentLength}, nil
}

func (p *requestSizeLimiting) deny(x *Exchange) {
	status := 413
	if strings.EqualFold(strings.TrimSpace(x.Header("Expect")), "100-continue") {
		status = 417
	}
	x.RespondError(status, "Request size limit exceeded")
	x.ctx.SetConnectionClose() // the unread body makes the connection unusable
	x.Outcome("request-size-limiting", "denied")
}

func (p *requestSizeLimiting) Access(x *Exchange) error {
	switch cl := x.ctx.Request.Header.ContentLength(); {
	case cl >= 0:
		if int64(cl) > p.limit {
			p.deny(x)
		}
	case cl == -1: // chunked
		if !x.bodyLimited || p.limit < x.bodyLimit {
			x.bodyLimit, x.bodyLimited = p.limit, true
		}
	case p.requireLen:
		x.RespondError(411, "A valid Content-Length header is required")
		x.Outcome("request-size-limiting", "length_required")
	}
	return nil
}
