package kongplugin

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/Kong/go-pdk"
	"github.com/Kong/go-pdk/entities"

	"github.com/seed-008287da/sluice/policy/dimensions"
	"github.com/seed-008287da/sluice/policy/field"
)

// pdkAccessor reads request attributes through the PDK for
// dimensions.Builder.Fill: one IPC round trip per method, each called at
// most once per request. It remembers the consumer so the groups can be
// taken from its tags without a second call.
type pdkAccessor struct {
	kong     *pdk.PDK
	consumer *entities.Consumer
}

var _ dimensions.Accessor = (*pdkAccessor)(nil)

func (a *pdkAccessor) Method() (string, error)         { return a.kong.Request.GetMethod() }
func (a *pdkAccessor) Path() (string, error)           { return a.kong.Request.GetPath() }
func (a *pdkAccessor) ClientIP() (string, error)       { return a.kong.Client.GetForwardedIp() }
func (a *pdkAccessor) Header(n string) (string, error) { return a.kong.Request.GetHeader(n) }
func (a *pdkAccessor) QueryArg(n string) (string, error) {
	return a.kong.Request.GetQueryArg(n)
}

func (a *pdkAccessor) Consumer() (dimensions.ConsumerInfo, error) {
	c, err := a.getConsumer()
	if err != nil {
		return dimensions.ConsumerInfo{}, err
	}
	return dimensions.ConsumerInfo{ID: c.Id, Username: c.Username, CustomID: c.CustomId}, nil
}

func (a *pdkAccessor) getConsumer() (*entities.Consumer, error) {
	if a.consumer != nil {
		return a.consumer, nil
	}
	c, err := a.kong.Client.GetConsumer()
	if err != nil {
		return nil, err
	}
	a.consumer = &c
	return a.consumer, nil
}

func (a *pdkAccessor) Route() (dimensions.Entity, error) {
	r, err := a.kong.Router.GetRoute()
	return dimensions.Entity{ID: r.Id, Name: r.Name}, err
}

func (a *pdkAccessor) Service() (dimensions.Entity, error) {
	s, err := a.kong.Router.GetService()
	return dimensions.Entity{ID: s.Id, Name: s.Name}, err
}

// GroupTagPrefix marks a consumer tag that names a consumer group: a
// consumer tagged "group:gold" is in group "gold". OSS Kong has no
// consumer groups and go-pdk has no API for Enterprise's, so tags are how
// the plugins learn them from the consumer entity itself.
const GroupTagPrefix = "group:"

// groupsFromTags returns the group names in a consumer's tags, in tag
// order.
func groupsFromTags(tags []string) []string {
	var gs []string
	for _, t := range tags {
		if name, ok := strings.CutPrefix(t, GroupTagPrefix); ok && name != "" {
			gs = append(gs, name)
		}
	}
	return gs
}

// groupsFromList parses a comma-separated list of group names, as an auth
// plugin would put it in a header; blanks are dropped.
func groupsFromList(s string) []string {
	var gs []string
	for _, g := range strings.Split(s, ",") {
		if g = strings.TrimSpace(g); g != "" {
			gs = append(gs, g)
		}
	}
	return gs
}

// groupsFromValue reads groups from a kong.ctx.shared value: an array of
// strings or a comma-separated string.
func groupsFromValue(v any) ([]string, error) {
	switch t := v.(type) {
	case nil:
		return nil, nil
	case string:
		return groupsFromList(t), nil
	case []any:
		gs := make([]string, 0, len(t))
		for i, e := range t {
			s, ok := e.(string)
			if !ok {
				p := "groups[" + strconv.Itoa(i) + "]"
				return nil, fmt.Errorf("%w: %s: %s", ErrSharedValue, p, field.Expected(p, field.String, e))
			}
			if s != "" {
				gs = append(gs, s)
			}
		}
		return gs, nil
	}
	return nil, fmt.Errorf("%w: groups: %s", ErrSharedValue, field.Expected("groups", "a list of strings or a string", v))
}
