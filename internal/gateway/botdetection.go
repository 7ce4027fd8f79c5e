package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/seed-008287da/sluice/internal/gateway/kongconf"
	"github.com/seed-008287da/sluice/policy/field"
)

// PriorityBotDetection is Kong's bot-detection PRIORITY.
const PriorityBotDetection = 2500

// badBots are the User-Agent patterns Kong's bot-detection denies by
// default (its rules list, taken by Kong from ua-parser's uap-core
// regexes.yaml), checked unanchored and case-sensitively.
var badBots = compileAll([]string{
	`(Pingdom\.com_bot_version_)(\d+)\.(\d+)`,
	`(facebookexternalhit)/(\d+)\.(\d+)`,
	`Google.*/\+/web/snippet`,
	`(Twitterbot)/(\d+)\.(\d+)`,
	`\b(Boto3?|JetS3t|aws-(?:cli|sdk-(?:cpp|go|java|nodejs|ruby2?|dotnet-(?:\d{1,2}|core)))|s3fs)/(\d+)\.(\d+)(?:\.(\d+)|)`,
	` PTST/\d+(?:\.)?\d+$`,
	`/((?:Ant-)?Nutch|[A-z]+[Bb]ot|[A-z]+[Ss]pider|Axtaris|fetchurl|Isara|ShopSalad|Tailsweep)[ \-](\d+)(?:\.(\d+)(?:\.(\d+))?)?`,
	`\b(008|Altresium|Argus|BaiduMobaider|BoardReader|DNSGroup|DataparkSearch|EDI|Goodzer|Grub|INGRID|Infohelfer|LinkedInBot|LOOQ|Nutch|OgScrper|PathDefender|Peew|PostPost|Steeler|Twitterbot|VSE|WebCrunch|WebZIP|Y!J-BR[A-Z]|YahooSeeker|envolk|sproose|wminer)/(\d+)(?:\.(\d+)|)(?:\.(\d+)|)`,
	`(MSIE) (\d+)\.(\d+)([a-z]\d|[a-z]|);.* MSIECrawler`,
	`(Google-HTTP-Java-Client|Apache-HttpClient|Go-http-client|scalaj-http|http%20client|Python-urllib|HttpMonitor|TLSProber|WinHTTP|JNLP|okhttp|aihttp|reqwest|axios|unirest-(?:java|python|ruby|nodejs|php|net))(?:[ /](\d+)(?:\.(\d+)|)(?:\.(\d+)|)|)`,
	`(CSimpleSpider|Cityreview Robot|CrawlDaddy|CrawlFire|Finderbots|Index crawler|Job Roboter|KiwiStatus Spider|Lijit Crawler|QuerySeekerSpider|ScollSpider|Trends Crawler|USyd-NLP-Spider|SiteCat Webbot|BotName\/\$BotVersion|123metaspider-Bot|1470\.net crawler|50\.nu|8bo Crawler Bot|Aboundex|Accoona-[A-z]{1,30}-Agent|AdsBot-Google(?:-[a-z]{1,30}|)|altavista|AppEngine-Google|archive.{0,30}\.org_bot|archiver|Ask Jeeves|[Bb]ai[Dd]u[Ss]pider(?:-[A-Za-z]{1,30})(?:-[A-Za-z]{1,30}|)|bingbot|BingPreview|blitzbot|BlogBridge|Bloglovin|BoardReader Blog Indexer|BoardReader Favicon Fetcher|boitho.com-dc|BotSeer|BUbiNG|\b\w{0,30}favicon\w{0,30}\b|\bYeti(?:-[a-z]{1,30}|)|Catchpoint(?: bot|)|[Cc]harlotte|Checklinks|clumboot|Comodo HTTP\(S\) Crawler|Comodo-Webinspector-Crawler|ConveraCrawler|CRAWL-E|CrawlConvera|Daumoa(?:-feedfetcher|)|Feed Seeker Bot|Feedbin|findlinks|Flamingo_SearchEngine|FollowSite Bot|furlbot|Genieo|gigabot|GomezAgent|gonzo1|(?:[a-zA-Z]{1,30}-|)Googlebot(?:-[a-zA-Z]{1,30}|)|Google SketchUp|grub-client|gsa-crawler|heritrix|HiddenMarket|holmes|HooWWWer|htdig|ia_archiver|ICC-Crawler|Icarus6j|ichiro(?:/mobile|)|IconSurf|IlTrovatore(?:-Setaccio|)|InfuzApp|Innovazion Crawler|InternetArchive|IP2[a-z]{1,30}Bot|jbot\b|KaloogaBot|Kraken|Kurzor|larbin|LEIA|LesnikBot|Linguee Bot|LinkAider|LinkedInBot|Lite Bot|Llaut|lycos|Mail\.RU_Bot|masscan|masidani_bot|Mediapartners-Google|Microsoft .{0,30} Bot|mogimogi|mozDex|MJ12bot|msnbot(?:-media {0,2}|)|msrbot|Mtps Feed Aggregation System|netresearch|Netvibes|NewsGator[^/]{0,30}|^NING|Nutch[^/]{0,30}|Nymesis|ObjectsSearch|OgScrper|Orbiter|OOZBOT|PagePeeker|PagesInventory|PaxleFramework|Peeplo Screenshot Bot|PlantyNet_WebRobot|Pompos|Qwantify|Read%20Later|Reaper|RedCarpet|Retreiver|Riddler|Rival IQ|scooter|Scrapy|Scrubby|searchsight|seekbot|semanticdiscovery|SemrushBot|Simpy|SimplePie|SEOstats|SimpleRSS|SiteCon|Slackbot-LinkExpanding|Slack-ImgProxy|Slurp|snappy|Speedy Spider|Squrl Java|Stringer|TheUsefulbot|ThumbShotsBot|Thumbshots\.ru|Tiny Tiny RSS|Twitterbot|WhatsApp|URL2PNG|Vagabondo|VoilaBot|^vortex|Votay bot|^voyager|WASALive.Bot|Web-sniffer|WebThumb|WeSEE:[A-z]{1,30}|WhatWeb|WIRE|WordPress|Wotbox|www\.almaden\.ibm\.com|Xenu(?:.s|) Link Sleuth|Xerka [A-z]{1,30}Bot|yacy(?:bot|)|YahooSeeker|Yahoo! Slurp|Yandex\w{1,30}|YodaoBot(?:-[A-z]{1,30}|)|YottaaMonitor|Yowedo|^Zao|^Zao-Crawler|ZeBot_www\.ze\.bz|ZooShot|ZyBorg)(?:[ /]v?(\d+)(?:\.(\d+)(?:\.(\d+)|)|)|)`,
	`(?:\/[A-Za-z0-9\.]+|) {0,5}([A-Za-z0-9 \-_\!\[\]:]{0,50}(?:[Aa]rchiver|[Ii]ndexer|[Ss]craper|[Bb]ot|[Ss]pider|[Cc]rawl[a-z]{0,50}))[/ ](\d+)(?:\.(\d+)(?:\.(\d+)|)|)`,
	`(?:\/[A-Za-z0-9\.]+|) {0,5}([A-Za-z0-9 \-_\!\[\]:]{0,50}(?:[Aa]rchiver|[Ii]ndexer|[Ss]craper|[Bb]ot|[Ss]pider|[Cc]rawl[a-z]{0,50})) (\d+)(?:\.(\d+)(?:\.(\d+)|)|)`,
	`((?:[A-z0-9]{1,50}|[A-z\-]{1,50} ?|)(?: the |)(?:[Ss][Pp][Ii][Dd][Ee][Rr]|[Ss]crape|[Cc][Rr][Aa][Ww][Ll])[A-z0-9]{0,50})(?:(?:[ /]| v)(\d+)(?:\.(\d+)|)(?:\.(\d+)|)|)`,
})

func compileAll(rules []string) []*regexp.Regexp {
	out := make([]*regexp.Regexp, len(rules))
	for i, r := range rules {
		out[i] = regexp.MustCompile(r)
	}
	return out
}

// botDetection is Kong's bot-detection plugin: a User-Agent matching an
// allow pattern passes; else one matching a deny pattern or a known bot
// gets 403. A request without User-Agent passes; one with several gets
// 400.
type botDetection struct {
	allow, deny []*regexp.Regexp
	cache       sync.Map // User-Agent -> denied
	cached      atomic.Int64
}

type botDetectionConfig struct {
	Allow []string `json:"allow"`
	Deny  []string `json:"deny"`
}

func newBotDetection(raw json.RawMessage, env *BuildEnv) (Plugin, error) {
	var c botDetectionConfig
	if err := decodeStrict(raw, &c); err != nil {
		return nil, err
	}
	var errs kongconf.Errors
	errs = append(errs, noConsumer(env)...)
	p := &botDetection{}
	p.allow = compileRegexes(&errs, "config.allow", c.Allow)
	p.deny = compileRegexes(&errs, "config.deny", c.Deny)
	if len(errs) > 0 {
		return nil, errs
	}
	return p, nil
}

// compileRegexes compiles the patterns of a config list, appending an
// error for each invalid one.
func compileRegexes(errs *kongconf.Errors, path string, list []string) []*regexp.Regexp {
	var out []*regexp.Regexp
	for i, s := range list {
		re, err := regexp.Compile(s)
		if err != nil {
			*errs = append(*errs, field.Error{Path: fmt.Sprintf("%s[%d]", path, i), Message: regexMessage(s)})
			continue
		}
		out = append(out, re)
	}
	return out
}

// regexMessage is Kong's message for an invalid regex, with what differs:
// sluice's expressions are Go's RE2, which has no look-around and no
// back-references where Kong's PCRE has.
func regexMessage(s string) string {
	return fmt.Sprintf("not a valid regex: %s (sluice uses RE2 syntax: no look-around, back-references or possessive quantifiers)", s)
}

// noConsumer is the error of a plugin Kong does not allow at consumer
// scope (typedefs.no_consumer).
func noConsumer(env *BuildEnv) kongconf.Errors {
	if env.Entity != nil && env.Entity.Consumer != nil {
		return kongconf.Errors{{Path: "consumer", Message: "value must be null"}}
	}
	return nil
}

func (p *botDetection) Access(x *Exchange) error {
	ua := x.ctx.Request.Header.UserAgent()
	switch {
	case len(ua) == 0 && !hasRawHeader(x.ctx.Request.Header.RawHeaders(), "user-agent", 1):
		return nil
	case hasRawHeader(x.ctx.Request.Header.RawHeaders(), "user-agent", 2):
		x.RespondError(400, "Only one User-Agent header allowed")
		x.Outcome("bot-detection", "denied")
		return nil
	}
	if p.match(strings.TrimSpace(string(ua))) {
		x.RespondError(403, "Forbidden")
		x.Outcome("bot-detection", "denied")
	}
	return nil
}

// match reports whether a User-Agent is denied.
// Answers are cached per instance for the first uaCacheSize agents seen,
// as Kong caches them (the bot rules take microseconds per agent).
func (p *botDetection) match(ua string) bool {
	if v, ok := p.cache.Load(ua); ok {
		return v.(bool)
	}
	denied := !matchRegexes(p.allow, ua) && (matchRegexes(p.deny, ua) || matchRegexes(badBots, ua))
	if p.cached.Add(1) <= uaCacheSize {
		p.cache.Store(ua, denied)
	}
	return denied
}

// uaCacheSize bounds the User-Agents whose answer is cached.
const uaCacheSize = 10000

// hasRawHeader reports whether raw request headers hold at least n
// headers named name (lower case), which fasthttp folds into one for
// User-Agent.
func hasRawHeader(raw []byte, name string, n int) bool {
	seen := 0
	for len(raw) > 0 {
		line := raw
		if i := bytes.IndexByte(raw, '\n'); i >= 0 {
			line, raw = raw[:i], raw[i+1:]
		} else {
			raw = nil
		}
		if k, _, ok := bytes.Cut(line, []byte(":")); ok && equalFoldASCII(bytes.TrimSpace(k), name) {
			seen++
			if seen >= n {
				return true
			}
		}
	}
	return false
}

func matchRegexes(list []*regexp.Regexp, s string) bool {
	for _, re := range list {
		if re.MatchString(s) {
			return true
		}
	}
	return false
}
