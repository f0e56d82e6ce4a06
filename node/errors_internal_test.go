package node

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestClassify: server replies and client failures map to the kinds the
// client acts on (a retry cannot fix ErrAuth, ErrTLS, ErrProtocol,
// ErrClosed).
func TestClassify(t *testing.T) {
	cases := []struct {
		err  error
		want error
	}{
		{errors.New("WRONGPASS invalid username-password pair or user is disabled."), ErrAuth},
		{errors.New("NOAUTH Authentication required."), ErrAuth},
		{errors.New("NOPERM this user has no permissions to access one of the keys used as arguments"), ErrAuth},
		{errors.New("redigo: get on closed pool"), ErrClosed},
		{errors.New("redigo: unexpected response line (possible server error or unsupported concurrent read by application)"), ErrProtocol},
		{errors.New("redigo: connection pool exhausted"), nil},
		{context.DeadlineExceeded, ErrTimeout},
		{errors.New("ERR unknown command"), nil},
		{ErrClosed, ErrClosed},
		{unexpected("x"), ErrProtocol},
	}
	for _, c := range cases {
		e := (&Redis{addr: "a"}).fail("acquire", c.err).(*Error)
		assert.Equal(t, c.want, e.Kind, "%v", c.err)
	}
}
