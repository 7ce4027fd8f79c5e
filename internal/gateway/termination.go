package gateway

import (
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/seed-008287da/sluice/internal/gateway/kongconf"
	"github.com/seed-008287da/sluice/policy/field"
)

// requestTermination is Kong's request-termination plugin (priority 2):
// it answers every request itself with a fixed status and message or body,
// or with echo, a JSON description of the request. The quickstart uses it
// as an upstream that needs no other process.
type requestTermination struct {
	status      int
	body        []byte
	contentType string
	echo        bool
	trigger     string
}

type requestTerminationConfig struct {
	StatusCode  *int   `json:"status_code"`
	Message     string `json:"message"`
	Body        string `json:"body"`
	ContentType string `json:"content_type"`
	Echo        bool   `json:"echo"`
	Trigger     string `json:"trigger"`
}

func newRequestTermination(raw json.RawMessage, env *BuildEnv) (Plugin, error) {
	var c requestTerminationConfig
	if err := decodeStrict(raw, &c); err != nil {
		return nil, err
	}
	var errs kongconf.Errors
	p := &requestTermination{status: 503, echo: c.Echo, trigger: c.Trigger, contentType: c.ContentType}
	if c.StatusCode != nil {
		p.status = *c.StatusCode
		if p.status < 100 || p.status > 599 {
			errs = append(errs, field.Error{Path: "config.status_code", Message: "value should be between 100 and 599"})
		}
	}
	switch {
	case c.Message != "" && c.Body != "":
		errs = append(errs, field.Error{Path: "config", Message: "message cannot be used with content_type or body"})
	case c.Body != "":
		p.body = []byte(c.Body)
		if p.contentType == "" {
			p.contentType = "application/json; charset=utf-8"
		}
	case c.ContentType != "":
		errs = append(errs, field.Error{Path: "config.content_type", Message: "content_type requires a body"})
	default:
		msg := c.Message
		if msg == "" {
			msg = defaultStatusMessage(p.status)
		}
		p.body = kongErrorBody(msg, "")
		p.contentType = jsonType
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return p, nil
}

func defaultStatusMessage(status int) string {
	switch status {
	case 503:
		return "Service unavailable"
	case 200:
		return "OK"
	}
	return "Request terminated"
}

func (p *requestTermination) Access(x *Exchange) error {
	if p.trigger != "" && x.Header(p.trigger) == "" && !x.HasQuery(p.trigger) {
		return nil
	}
	x.Outcome("request-termination", "terminated")
	if !p.echo {
		x.Respond(p.status, p.contentType, p.body)
		return nil
	}
	headers := map[string]string{}
	for k, v := range x.ctx.Request.Header.All() {
		name := strings.ToLower(string(k))
		if prev, ok := headers[name]; ok {
			headers[name] = prev + ", " + string(v)
		} else {
			headers[name] = string(v)
		}
	}
	query := map[string]string{}
	for k, v := range x.ctx.QueryArgs().All() {
		query[string(k)] = string(v)
	}
	host, port, err := net.SplitHostPort(x.Host())
	if err != nil {
		host, port = x.Host(), ""
	}
	scheme := "http"
	if x.ctx.IsTLS() {
		scheme = "https"
	}
	req := map[string]any{
		"scheme": scheme, "host": host, "port": port, "method": x.Method(), "path": x.Path(),
		"uri": string(x.ctx.RequestURI()), "headers": headers, "query": query,
		"raw_body": "",
	}
	if n, err := strconv.Atoi(port); err == nil {
		req["port"] = n
	}
	out := map[string]any{"message": "request echo", "request": req, "client_ip": x.clientIP()}
	if x.Route != nil {
		out["matched_route"] = map[string]any{"id": x.Route.ID, "name": x.Route.Name}
	}
	if x.Service != nil {
		out["matched_service"] = map[string]any{"id": x.Service.ID, "name": x.Service.Name}
	}
	if x.Consumer != nil {
		out["consumer"] = map[string]any{"id": x.Consumer.ID, "username": x.Consumer.Username, "custom_id": x.Consumer.CustomID}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return fmt.Errorf("gateway: encoding the echo: %w", err)
	}
	x.Respond(p.status, jsonType, b)
	return nil
}
