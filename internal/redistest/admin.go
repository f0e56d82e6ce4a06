package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Admin is a test's own connection to a Redis server, for the commands
// the lock algorithm never sends (SCRIPT FLUSH, DEBUG SLEEP, INFO, CLIENT
// KILL). It speaks just enough RESP for that, so that the node package
// stays the only user of a Redis client library. Safe for concurrent use:
// one command at a time.
type Admin struct {
	mu   sync.Mutex // guards conn and rd, one command at a time
	conn net.Conn
	rd   *bufio.Reader
}

// Dial connects an Admin to the server at rawURL (redis://host:port) and
// closes it when the test ends.
func Dial(t testing.TB, rawURL string) *Admin {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &Admin{conn: c, rd: bufio.NewReader(c)}
}

// Do sends one command and returns its reply: a string for a status, an
// int64, a []byte for a bulk string, nil, a []any for an array, or an
// error for an error reply. ctx's deadline bounds it.
func (a *Admin) Do(ctx context.Context, args ...any) (any, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.deadline(ctx); err != nil {
		return nil, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, arg := range args {
		s := fmt.Sprint(arg)
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(s), s)
	}
	if _, err := io.WriteString(a.conn, b.String()); err != nil {
		return nil, err
	}
	return a.read()
}

// Receive reads the next reply without sending a command: the messages
// of a subscription made with Do("SUBSCRIBE", ...). ctx's deadline bounds
// the wait; an error that is not a reply (a timeout) leaves the Admin
// unusable only if part of a reply had been read.
func (a *Admin) Receive(ctx context.Context) (any, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.deadline(ctx); err != nil {
		return nil, err
	}
	return a.read()
}

// deadline bounds the connection's next reads and writes by ctx's
// deadline, or 30 s without one.
func (a *Admin) deadline(ctx context.Context) error {
	d, ok := ctx.Deadline()
	if !ok {
		d = time.Now().Add(30 * time.Second)
	}
	return a.conn.SetDeadline(d)
}

// errReply is an error reply from the server.
type errReply string

func (e errReply) Error() string { return string(e) }

func (a *Admin) read() (any, error) {
	line, err := a.rd.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, errors.New("redistest: empty reply line")
	}
	body := line[1:]
	switch line[0] {
	case '+':
		return body, nil
	case '-':
		return nil, errReply(body)
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return nil, err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(a.rd, buf); err != nil {
			return nil, err
		}
		return buf[:n], nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return nil, err
		}
		out := make([]any, n)
		for i := range out {
			v, err := a.read()
			if err != nil {
				if _, ok := err.(errReply); !ok {
					return nil, err
				}
				v = err
			}
			out[i] = v
		}
		return out, nil
	}
	return nil, fmt.Errorf("redistest: unexpected reply %q", line)
}

// Connections returns total_connections_received from INFO stats: how
// many connections the server has accepted since it started.
func (a *Admin) Connections(t testing.TB) int {
	t.Helper()
	v, err := a.Do(context.Background(), "INFO", "stats")
	if err != nil {
		t.Fatal(err)
	}
	s, _ := v.([]byte)
	for line := range strings.Lines(string(s)) {
		if n, ok := strings.CutPrefix(strings.TrimSpace(line), "total_connections_received:"); ok {
			c, err := strconv.Atoi(n)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
	}
	t.Fatal("redistest: no total_connections_received in INFO stats")
	return 0
}
