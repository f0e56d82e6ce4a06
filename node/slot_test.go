package node

import (
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Slot follows Redis Cluster's key hash: CRC16/XMODEM mod 16384, of the
// hash tag where there is one (the examples of the cluster
// specification).
func TestSlotIsRedisClusters(t *testing.T) {
	assert.Equal(t, uint16(0x31C3), crc16("123456789"), "CRC-16/XMODEM's check value")
	assert.Equal(t, 12182, Slot("foo"))
	assert.Equal(t, Slot("user1000"), Slot("{user1000}.following"))
	assert.Equal(t, Slot("{user1000}.followers"), Slot("{user1000}.following"))
	assert.Equal(t, Slot("bar"), Slot("foo{bar}{zap}"), "the first tag")
	assert.Equal(t, Slot("{bar"), Slot("foo{{bar}}zap"), "from the first {")
	assert.Equal(t, int(crc16("foo{}{bar}")%Slots), Slot("foo{}{bar}"), "an empty tag: the whole key")
	assert.Equal(t, int(crc16("foo{bar")%Slots), Slot("foo{bar"), "no }: the whole key")
}

// TagFor finds a tag for any slot range, the shortest first, and every
// slot has one of at most four characters.
func TestTagForEverySlot(t *testing.T) {
	assert.Equal(t, "", TagFor(nil))
	assert.Equal(t, "", TagFor([]SlotRange{{5, 4}}))
	assert.Equal(t, "0", TagFor([]SlotRange{{0, Slots - 1}}))
	for _, r := range [][]SlotRange{{{0, 5460}}, {{5461, 10922}}, {{10923, 16383}}, {{7, 7}}, {{16383, 16383}}, {{100, 100}, {9000, 9001}}} {
		tag := TagFor(r)
		require.NotEmpty(t, tag, "%v", r)
		s := Slot("{" + tag + "}lock:name:waiters")
		in := false
		for _, x := range r {
			in = in || s >= x.First && s <= x.Last
		}
		assert.True(t, in, "tag %q (slot %d) for %v", tag, s, r)
	}
	seen := make([]bool, Slots)
	left := Slots
	for n := 0; n < 36*36*36*36 && left > 0; n++ {
		s := Slot(base36(n))
		if !seen[s] {
			seen[s], left = true, left-1
		}
	}
	assert.Zero(t, left, "slots without a tag of at most four characters")
}

func base36(n int) string {
	const digits = "0123456789abcdefghijklmnopqrstuvwxyz"
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 36 {
		b = append([]byte{digits[n%36]}, b...)
	}
	return string(b)
}

// parseClusterSlots groups CLUSTER SLOTS' rows by master, keeps the
// seed's credentials, and takes the seed's host where a row has none.
func TestParseClusterSlots(t *testing.T) {
	seed := Endpoint{Host: "10.0.0.1", Port: 7000, Password: "pw", TLS: true}
	row := func(first, last int64, host string, port int64, id string) any {
		return []any{first, last, []any{[]byte(host), port, []byte(id)}, []any{[]byte("10.0.0.9"), int64(7100), []byte("replica")}}
	}
	ms, err := parseClusterSlots([]any{
		row(10923, 16383, "10.0.0.3", 7002, "c"),
		row(0, 5460, "", 7000, "a"),
		row(5461, 10000, "10.0.0.2", 7001, "b"),
		row(10001, 10922, "10.0.0.2", 7001, "b"),
	}, seed)
	require.NoError(t, err)
	require.Len(t, ms, 3)
	assert.Equal(t, "a", ms[0].ID)
	assert.Equal(t, "10.0.0.1:7000", ms[0].Endpoint.Addr(), "the seed's host where none is announced")
	assert.Equal(t, []SlotRange{{5461, 10000}, {10001, 10922}}, ms[1].Slots)
	assert.Equal(t, "pw", ms[2].Endpoint.Password)
	assert.True(t, ms[2].Endpoint.TLS)

	_, err = parseClusterSlots("OK", seed)
	assert.ErrorIs(t, err, ErrProtocol)
	_, err = parseClusterSlots([]any{[]any{int64(0), int64(99999), []any{[]byte("h"), int64(1)}}}, seed)
	assert.ErrorIs(t, err, ErrProtocol)
}

// movedTo reads a MOVED reply for the copy's slot only.
func TestMovedTo(t *testing.T) {
	err := Fail("127.0.0.1:7000", "acquire", nil, errString("MOVED 3999 127.0.0.1:7002"))
	assert.Equal(t, "127.0.0.1:7002", movedTo(err, 3999))
	assert.Equal(t, "", movedTo(err, 4000), "another slot")
	assert.Equal(t, "", movedTo(errString("ASK 3999 127.0.0.1:7002"), 3999))
	assert.Equal(t, "", movedTo(errString("MOVED"), 3999))
}

// askedTo reads the address of a node's ASK error reply, wrapped as the
// node wraps it, and nothing else.
func TestAskedTo(t *testing.T) {
	err := Fail("127.0.0.1:7000", "acquire", nil, redis.Error("ASK 3999 127.0.0.1:7002"))
	assert.Equal(t, "127.0.0.1:7002", askedTo(err))
	assert.Equal(t, "", askedTo(Fail("127.0.0.1:7000", "acquire", nil, redis.Error("MOVED 3999 127.0.0.1:7002"))))
	assert.Equal(t, "", askedTo(errString("ASK 3999 127.0.0.1:7002")), "not a reply of the node")
	assert.Equal(t, "", askedTo(redis.Error("ASK 3999")))
}

type errString string

func (e errString) Error() string { return string(e) }
