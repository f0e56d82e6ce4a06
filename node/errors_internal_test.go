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
		{errors.New("ERR unknown command 'SETX', with args beginning with: 'k' "), ErrUnsupported},
		{errors.New("ERR unknown command 'EVALSHA', with args beginning with: 'abc' '1' 'k' 'tok' "), ErrNoScripts},
		{errors.New("ERR unknown command 'evalsha', with args beginning with: "), ErrNoScripts},
		{errors.New("ERR unknown command `EVALSHA`, with args beginning with: `abc`, "), ErrNoScripts},
		{errors.New("ERR The user executing the script can't run this command or subcommand script: 4f0a, on @user_script:4."), ErrAuth},
		{errors.New("NOPERM User noset has no permissions to run the 'set' command"), ErrAuth},
		{errors.New("WRONGTYPE Operation against a key holding the wrong kind of value"), ErrWrongType},
		{errors.New("READONLY You can't write against a read only replica."), ErrReadOnly},
		{errors.New("MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk."), ErrReadOnly},
		{errors.New("OOM command not allowed when used memory > 'maxmemory'."), ErrOOM},
		{errors.New("ERR Error running script (call to f_x): @user_script:2: @user_script: 2: -OOM command not allowed when used memory > 'maxmemory'."), ErrOOM},
		{errors.New("LOADING Redis is loading the dataset in memory"), nil},
		{errors.New("BUSY Redis is busy running a script."), nil},
		{errors.New("TRYAGAIN Multiple keys request during rehashing of slot"), nil},
		{ErrClosed, ErrClosed},
		{unexpected("x"), ErrProtocol},
	}
	for _, c := range cases {
		e := (&Redis{addr: "a"}).fail("acquire", c.err).(*Error)
		assert.Equal(t, c.want, e.Kind, "%v", c.err)
	}
}

// TestPermanent: what a retry cannot fix, and what it can.
func TestPermanent(t *testing.T) {
	for _, k := range []error{ErrAuth, ErrTLS, ErrProtocol, ErrClosed, ErrBadURL, ErrNoScripts, ErrUnsupported, ErrWrongType, ErrReadOnly, ErrOOM} {
		assert.True(t, Permanent(&Error{Addr: "a", Op: "acquire", Kind: k}), "%v", k)
	}
	for _, err := range []error{nil, ErrTimeout, ErrUnreachable, ErrCircuitOpen, errors.New("LOADING"), &Error{Addr: "a", Err: errors.New("x")}} {
		assert.False(t, Permanent(err), "%v", err)
	}
}

// TestRedactEchoedArgs: an unknown command's reply repeats its arguments
// (the token among them); the error keeps the command's name only.
func TestRedactEchoedArgs(t *testing.T) {
	raw := errors.New("ERR unknown command 'EVALSHA', with args beginning with: 'sha' '1' 'lk:job' '0123456789abcdef0123456789abcdef' ")
	err := (&Redis{addr: "a:1"}).fail("release", raw)
	assert.ErrorIs(t, err, ErrNoScripts)
	assert.NotContains(t, err.Error(), "0123456789abcdef")
	assert.NotContains(t, err.Error(), "lk:job")
	assert.Equal(t, "node a:1: release: node does not run scripts (EVAL/EVALSHA unknown or refused): ERR unknown command 'EVALSHA' (arguments not shown)", err.Error())
}

// TestTimeoutUnwrap: a timeout hides its context's deadline (a caller's
// errors.Is(err, context.DeadlineExceeded) is about its own context) but
// not another cause, such as ErrPoolWait.
func TestTimeoutUnwrap(t *testing.T) {
	cause := errors.New("a cause")
	assert.ErrorIs(t, &Error{Kind: ErrTimeout, Err: cause}, cause)
	assert.ErrorIs(t, &Error{Kind: ErrTimeout, Err: cause}, ErrTimeout)
	assert.NotErrorIs(t, &Error{Kind: ErrTimeout, Err: context.DeadlineExceeded}, context.DeadlineExceeded)
}
