package node

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// Endpoint is a parsed node URL: redis://[user[:password]@]host[:port][/db]
// or rediss:// for TLS. The port defaults to 6379 and db to 0. An IPv6
// host must be in brackets: redis://[::1]:6379.
type Endpoint struct {
	TLS      bool
	Host     string // host name or IP, without brackets
	Port     int
	Username string // ACL user; "" for the default user
	Password string // never printed by String or in errors
	DB       int
}

// ParseURL parses a node URL. Errors wrap ErrBadURL and never repeat the
// password.
func ParseURL(raw string) (Endpoint, error) {
	var e Endpoint
	// Where the URL holds a '@' anywhere, no error quotes any part of it:
	// url.Parse takes userinfo up to the last '@' before the first '/',
	// so a password's misplaced '/' can land the rest of it in the path.
	hasAt := strings.Contains(raw, "@")
	u, err := url.Parse(raw)
	if hasAt && (err != nil || u.User == nil || strings.Contains(u.Path+u.RawQuery+u.Fragment, "@")) {
		return e, fmt.Errorf("%w: %s", ErrBadURL, withheld)
	}
	show := func(s string) string {
		if hasAt {
			return "(not shown: the URL holds credentials)"
		}
		return strconv.Quote(s)
	}
	if err != nil {
		// url.Error would quote the whole URL, password included.
		var cause error = err
		if ue, ok := err.(*url.Error); ok {
			cause = ue.Err
		}
		return e, fmt.Errorf("%w: %v", ErrBadURL, cause)
	}
	switch u.Scheme {
	case "redis":
	case "rediss":
		e.TLS = true
	default:
		return e, fmt.Errorf("%w: scheme must be redis:// or rediss://, not %q", ErrBadURL, u.Scheme)
	}
	if u.Opaque != "" {
		return e, fmt.Errorf("%w: missing // after the scheme", ErrBadURL)
	}
	e.Host = u.Hostname()
	if e.Host == "" {
		return e, fmt.Errorf("%w: no host", ErrBadURL)
	}
	// url.Parse splits an unbracketed IPv6 address at its last colon:
	// redis://::1 would be host ":" port 1. A colon left in the host
	// means exactly that (brackets keep the port apart), so refuse it
	// rather than guess which colon, if any, starts the port.
	if strings.Contains(e.Host, ":") && !strings.HasPrefix(u.Host, "[") {
		return e, fmt.Errorf("%w: put an IPv6 address in brackets: redis://[::1]:6379", ErrBadURL)
	}
	e.Port = 6379
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return e, fmt.Errorf("%w: bad port %s", ErrBadURL, show(p))
		}
		e.Port = n
	}
	if u.User != nil {
		e.Username = u.User.Username()
		e.Password, _ = u.User.Password()
	}
	if db := strings.TrimPrefix(u.Path, "/"); db != "" {
		n, err := strconv.Atoi(db)
		if err != nil || n < 0 {
			return e, fmt.Errorf("%w: database must be a number, not %s", ErrBadURL, show(db))
		}
		e.DB = n
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return e, fmt.Errorf("%w: query and fragment are not supported", ErrBadURL)
	}
	return e, nil
}

// withheld explains a malformed URL whose details are not shown because
// they may hold a password.
const withheld = "the URL holds '@' but does not parse as user:password@host; " +
	"percent-encode '/', '?', '#', '%' and '@' in the user name and password " +
	"(no part of the URL is shown, to keep the password out of logs)"

// Addr returns host:port.
func (e Endpoint) Addr() string { return net.JoinHostPort(e.Host, strconv.Itoa(e.Port)) }

// String returns the URL with the password replaced by "xxxxx".
func (e Endpoint) String() string {
	var b strings.Builder
	if e.TLS {
		b.WriteString("rediss://")
	} else {
		b.WriteString("redis://")
	}
	if e.Username != "" || e.Password != "" {
		b.WriteString(url.User(e.Username).String())
		if e.Password != "" {
			b.WriteString(":xxxxx")
		}
		b.WriteByte('@')
	}
	b.WriteString(e.Addr())
	if e.DB != 0 {
		b.WriteByte('/')
		b.WriteString(strconv.Itoa(e.DB))
	}
	return b.String()
}
