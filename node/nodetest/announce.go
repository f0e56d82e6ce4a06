package nodetest

// node.Announcer: what a lock's holder keeps beside its key (an
// election's leader), read only beside its own token.

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/node"
)

func testAnnounce(t *testing.T, f Factory) {
	e := start(t, f)
	an, ok := e.n.(node.Announcer)
	if !ok {
		t.Skip("the node is not a node.Announcer")
	}
	k := node.Key{Name: "lk:elect", Token: "tok-1"}
	rk := node.AnnounceKey(k.Name)
	read := func() node.Announced {
		t.Helper()
		a, err := an.InspectAnnounce(e.ctx, k.Name)
		require.NoError(t, err)
		return a
	}
	assert.Equal(t, node.Announced{}, read(), "nothing there")
	e.resultOf(an.Announce(e.ctx, &k, "1\nv", time.Minute))(node.Absent, "announce without the key")
	assert.Equal(t, int64(0), e.do("EXISTS", rk), "an announce without the key leaves nothing")

	e.resultOf(e.n.Acquire(e.ctx, &k, time.Minute, false))(node.Done, "acquire")
	a := read()
	assert.Equal(t, "tok-1", a.Token)
	assert.Empty(t, a.Text, "held, nothing announced")
	assert.InDelta(t, time.Minute, a.TTL, float64(5*time.Second))

	e.resultOf(an.Announce(e.ctx, &k, "1\nfirst", time.Minute))(node.Done, "announce")
	assert.Equal(t, "1\nfirst", read().Text)
	assert.InDelta(t, time.Minute, e.pttl(rk), float64(5*time.Second), "the record lives its TTL")
	e.resultOf(an.Announce(e.ctx, &k, "1\nsecond\nline", time.Minute))(node.Done, "announce again")
	assert.Equal(t, "1\nsecond\nline", read().Text, "the last announcement, newlines and all")

	other := node.Key{Name: k.Name, Token: "tok-2"}
	e.resultOf(an.Announce(e.ctx, &other, "2\nimpostor", time.Minute))(node.Taken, "announce with another token")
	assert.Equal(t, "1\nsecond\nline", read().Text, "unchanged")
	e.resultOf(e.n.Release(e.ctx, &other, false))(node.Taken, "release with another token")
	assert.Equal(t, "1\nsecond\nline", read().Text, "unchanged")

	// Released without Key.Record: the record stays until it expires,
	// but is never read beside another holder's token.
	e.resultOf(e.n.Release(e.ctx, &k, false))(node.Done, "release")
	assert.Equal(t, node.Announced{}, read(), "no key, no leader")
	e.resultOf(e.n.Acquire(e.ctx, &other, time.Minute, false))(node.Done, "the next holder")
	a = read()
	assert.Equal(t, "tok-2", a.Token)
	assert.Empty(t, a.Text, "the previous holder's record is not the next one's")
	e.resultOf(an.Announce(e.ctx, &k, "1\nlate", time.Minute))(node.Taken, "a late announce of the previous holder")
	e.resultOf(an.Announce(e.ctx, &other, "2\nnext", time.Minute))(node.Done, "the next holder announces")
	late := k
	late.Record = true
	e.resultOf(e.n.Release(e.ctx, &late, false))(node.Taken, "a late release of the previous holder")
	assert.Equal(t, "2\nnext", read().Text, "leaves the next holder's record")

	_, err := an.Announce(e.ctx, &other, "", time.Minute)
	assert.Error(t, err, "an empty announcement is refused")
	other.Record = true
	e.resultOf(e.n.Release(e.ctx, &other, false))(node.Done, "release with the record")
	assert.Equal(t, int64(0), e.do("EXISTS", rk, k.Name), "the record went with the key")
}

// testConfirmAnnounce: a campaign's confirm keeps the record with the
// fence, both only under the token.
func testConfirmAnnounce(t *testing.T, f Factory) {
	e := start(t, f)
	an, ok := e.n.(node.Announcer)
	fe, fok := e.n.(node.Fencer)
	if !ok || !fok {
		t.Skip("the node is not a node.Announcer and a node.Fencer")
	}
	k := node.Key{Name: "lk:elect-confirm", Token: "tok-1"}
	rk, fk := node.AnnounceKey(k.Name), node.FenceKey(k.Name)
	e.resultOf(an.ConfirmAnnounce(e.ctx, &k, 7, time.Hour, "7\nv", time.Minute))(node.Absent, "confirm without the key")
	assert.Equal(t, int64(0), e.do("EXISTS", rk, fk), "a confirm without the key leaves nothing")

	res, err := fe.AcquireFenced(e.ctx, &k, time.Minute, time.Hour)
	require.NoError(t, err)
	require.Equal(t, node.Done, res.Status)
	high := res.Fence + 1000
	e.resultOf(an.ConfirmAnnounce(e.ctx, &k, high, time.Hour, fmt.Sprintf("%d\nfirst", high), 30*time.Second))(node.Done, "confirm and announce")
	a, err := an.InspectAnnounce(e.ctx, k.Name)
	require.NoError(t, err)
	assert.Equal(t, fmt.Sprintf("%d\nfirst", high), a.Text, "the record beside the token")
	assert.Equal(t, fmt.Sprint(high), e.get(fk), "the counter raised to the fence")
	assert.InDelta(t, 30*time.Second, e.pttl(rk), float64(5*time.Second), "the record lives its TTL")

	other := node.Key{Name: k.Name, Token: "tok-2"}
	e.resultOf(an.ConfirmAnnounce(e.ctx, &other, high+5, time.Hour, "x\nimpostor", time.Minute))(node.Taken, "another token")
	a, err = an.InspectAnnounce(e.ctx, k.Name)
	require.NoError(t, err)
	assert.Equal(t, fmt.Sprintf("%d\nfirst", high), a.Text, "unchanged")
	assert.Equal(t, fmt.Sprint(high), e.get(fk), "unchanged")

	_, err = an.ConfirmAnnounce(e.ctx, &k, high, time.Hour, "", time.Minute)
	assert.Error(t, err, "an empty record is refused")
	k.Record = true
	e.resultOf(e.n.Release(e.ctx, &k, false))(node.Done, "release, the record with it")
	assert.Equal(t, int64(0), e.do("EXISTS", rk), "the record went with the key")
	// A confirm that runs late, after the release, keeps nothing.
	e.resultOf(an.ConfirmAnnounce(e.ctx, &k, high+9, time.Hour, "late", time.Minute))(node.Absent, "a late confirm")
	assert.Equal(t, int64(0), e.do("EXISTS", rk), "no record after a late confirm")
	e.do("DEL", fk)
}
