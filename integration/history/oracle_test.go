package history_test

import (
	"testing"
	"time"

	"github.com/quorumlock/redlock/integration/checker"
	"github.com/quorumlock/redlock/integration/history"
	"github.com/quorumlock/redlock/redlock"
)

var t0 = time.Unix(1_700_000_000, 0)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func win(holder int, key, token string, from, to int, shared bool) checker.Window {
	return checker.Window{Holder: holder, Key: key, Token: token, Acquired: at(from), End: at(to), Shared: shared}
}

func TestOverlapsFindsTwoWritersAndAWriterWithAReader(t *testing.T) {
	ws := []checker.Window{
		win(0, "x", "a", 0, 100, false),
		win(1, "x", "b", 90, 200, false),  // overlaps a by 10ms
		win(2, "x", "c", 200, 300, false), // starts as b ends: fine
		win(3, "rw", "r1", 0, 100, true),
		win(4, "rw", "r2", 50, 150, true),  // two readers: fine
		win(5, "rw", "w", 140, 200, false), // a writer over r2
		win(6, "y", "d", 95, 150, false),   // another key: fine
	}
	got := history.Overlaps(ws)
	if len(got) != 2 {
		t.Fatalf("want the two overlaps, got %d: %q", len(got), got)
	}
}

func TestOverlapsPassesAGoodHistory(t *testing.T) {
	ws := []checker.Window{
		win(0, "x", "a", 0, 100, false),
		win(1, "x", "b", 100, 200, false),
		win(0, "x", "c", 200, 300, false),
		win(1, "rw", "r1", 0, 100, true),
		win(2, "rw", "r2", 10, 100, true),
		win(0, "rw", "w", 100, 150, false),
	}
	if got := history.Overlaps(ws); len(got) != 0 {
		t.Fatalf("a history without overlaps reported: %q", got)
	}
}

func TestTooManyFindsAThirdHolderOfTwoPermits(t *testing.T) {
	ws := []checker.Window{
		win(0, "s:permit:0", "a", 0, 100, false),
		win(1, "s:permit:1", "b", 10, 100, false),
		win(2, "s:permit:1", "c", 50, 60, false), // a third at once (and over b)
	}
	if got := history.TooMany(ws, "s:permit:", 2); len(got) != 1 {
		t.Fatalf("want one violation, got %q", got)
	}
	if got := history.TooMany(ws[:2], "s:permit:", 2); len(got) != 0 {
		t.Fatalf("two holders of two permits reported: %q", got)
	}
}

func TestStarvedFindsAWaiterOvertakenTooOften(t *testing.T) {
	waits := []history.Wait{
		{Holder: 0, Op: "lock", Group: "x", Start: at(0), End: at(500), Served: true},
		{Holder: 1, Client: 1, Op: "lock", Group: "x", Start: at(0), End: at(50), Served: true},
	}
	var grants []history.Grant
	for i := range 4 { // four later calls of holder 2 served while 0 waits
		grants = append(grants, history.Grant{Holder: 2, Key: "x", Start: at(10 + 100*i), Got: at(20 + 100*i)})
	}
	// Holder 3 began before holder 0: served first, not an overtake.
	grants = append(grants, history.Grant{Holder: 3, Key: "x", Start: at(-5), Got: at(30)})
	got := history.Starved(waits, grants, 3)
	if len(got) != 1 {
		t.Fatalf("want holder 0 starved (4 overtakes, bound 3), got %q", got)
	}
	if got := history.Starved(waits, grants, 4); len(got) != 0 {
		t.Fatalf("4 overtakes within a bound of 4 reported: %q", got)
	}

	// A writer behind a call of its own client (its sibling, waiting when
	// it began) takes the nodes' line twice: its bound doubles.
	behind := []history.Wait{
		{Holder: 0, Client: 0, Op: "lock", Group: "x", Start: at(0), End: at(500), Served: true},
		{Holder: 1, Client: 0, Op: "lock", Group: "x", Start: at(-1), End: at(200), Served: true},
	}
	if got := history.Starved(behind[:1], grants, 3); len(got) != 1 {
		t.Fatalf("want holder 0 starved alone (4 overtakes, bound 3), got %q", got)
	}
	if got := history.Starved(behind, grants, 3); len(got) != 0 {
		t.Fatalf("holder 0 behind its sibling (4 overtakes, bound 2×3) reported: %q", got)
	}
	// A sibling that began just after it (within StartTie) and was
	// served first reached the local queue first: ahead of it too.
	behind[1].Start = at(1)
	if got := history.Starved(behind, grants, 3); len(got) != 0 {
		t.Fatalf("holder 0 behind a sibling that began 1 ms later and was served first reported: %q", got)
	}
	behind[1].End = at(600) // served after it: behind it, not ahead
	if got := history.Starved(behind, grants, 3); len(got) != 1 {
		t.Fatalf("want holder 0 starved ahead of a sibling served after it, got %q", got)
	}
	behind[1].Start, behind[1].End = at(50), at(200) // began well after: a local overtake, not a tie
	if got := history.Starved(behind, grants, 3); len(got) != 1 {
		t.Fatalf("want holder 0 starved behind a sibling that began 50 ms after it, got %q", got)
	}
	behind[1].Start = at(-1)
	behind[1].Client = 1 // another client's call: not in its local queue
	if got := history.Starved(behind, grants, 3); len(got) != 1 {
		t.Fatalf("want holder 0 starved behind another client's call, got %q", got)
	}

	// A waiting reader: later readers let in first do not keep it out;
	// later writers do.
	reader := []history.Wait{{Holder: 0, Op: "rlock", Group: "rw", Start: at(0), End: at(500), Served: true, Shared: true}}
	var reads []history.Grant
	for i := range 4 {
		reads = append(reads, history.Grant{Holder: 2, Key: "rw", Start: at(10 + 100*i), Got: at(20 + 100*i), Shared: true})
	}
	if got := history.Starved(reader, reads, 3); len(got) != 0 {
		t.Fatalf("a reader overtaken by readers reported: %q", got)
	}
	for i := range reads {
		reads[i].Shared = false
	}
	if got := history.Starved(reader, reads, 3); len(got) != 1 {
		t.Fatalf("want the reader overtaken by 4 writers (bound 3), got %q", got)
	}
}

func TestStaleFindsOldTermsAndBadReads(t *testing.T) {
	terms := []history.Term{
		{Holder: 0, Term: 10, Values: []string{"a", "a'"}, Start: at(0), Got: at(5), Resigned: at(100)},
		{Holder: 1, Term: 20, Values: []string{"b"}, Start: at(50), Got: at(101), Resigned: at(200)},
		{Holder: 2, Term: 15, Values: []string{"c"}, Start: at(150), Got: at(201)}, // smaller than the term before it
	}
	read := func(start, end int, term int64, value string) history.Read {
		return history.Read{Holder: 3, Start: at(start), End: at(end), Leader: redlock.Leader{Term: term, Value: value}}
	}
	good := []history.Read{
		read(10, 20, 10, "a"),
		read(90, 110, 10, "a'"), // began before term 10's Resign returned
		read(95, 99, 20, "b"),   // term 20's Campaign had begun
		read(10, 20, 99, "z"),   // a term no Campaign returned: not checked
	}
	if got := history.Stale(terms[:2], good); len(got) != 0 {
		t.Fatalf("a good history: %q", got)
	}
	bad := []history.Read{
		read(101, 110, 10, "a"), // after term 10's Resign returned
		read(10, 40, 20, "b"),   // before term 20's Campaign began
		read(110, 120, 20, "a"), // a value term 20 never announced
	}
	if got := history.Stale(terms, bad); len(got) != 4 {
		t.Fatalf("want the term order and the three reads, got %d: %q", len(got), got)
	}
}

func TestFencesFindsAFenceThatDoesNotGrow(t *testing.T) {
	g := func(holder int, key string, got int, fence int64) history.Grant {
		return history.Grant{Holder: holder, Key: key, Start: at(got - 1), Got: at(got), Fence: fence}
	}
	good := []history.Grant{
		g(0, "x", 10, 100), g(1, "x", 20, 101), g(2, "y", 15, 50), // another key counts apart
		g(3, "x", 25, 0), // not fenced
		g(2, "x", 30, 5000),
	}
	if got := history.Fences(good); len(got) != 0 {
		t.Fatalf("a good history: %q", got)
	}
	bad := append(good, g(4, "x", 40, 5000), g(1, "x", 50, 4999))
	if got := history.Fences(bad); len(got) != 2 {
		t.Fatalf("want the equal and the smaller fence, got %d: %q", len(got), got)
	}
}
