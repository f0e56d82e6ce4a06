package checker

import (
	"testing"
	"time"
)

func TestMostAtOnce(t *testing.T) {
	t0 := time.Unix(0, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var c Checker
	c.Record(Window{Holder: 0, Key: "s:permit:0", Acquired: at(0), End: at(10)})
	c.Record(Window{Holder: 1, Key: "s:permit:1", Acquired: at(5), End: at(15)})
	c.Record(Window{Holder: 2, Key: "s:permit:0", Acquired: at(10), End: at(20)}) // starts where holder 0 ended
	c.Record(Window{Holder: 3, Key: "s:permit:2", Acquired: at(12), End: at(14)})
	c.Record(Window{Holder: 4, Key: "other", Acquired: at(0), End: at(30)})
	n, when := c.MostAtOnce("s:permit:")
	if n != 3 || !when.Equal(at(12)) {
		t.Fatalf("MostAtOnce = %d at %v, want 3 at 12ms", n, when.Sub(t0))
	}
	if n, _ := c.MostAtOnce("none"); n != 0 {
		t.Fatalf("no windows: %d", n)
	}
}

func TestOverlapsOfReadAndWriteHolds(t *testing.T) {
	t0 := time.Unix(0, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var c Checker
	c.Record(Window{Holder: 0, Key: "k", Token: "r0", Acquired: at(0), End: at(10), Shared: true})
	c.Record(Window{Holder: 1, Key: "k", Token: "r1", Acquired: at(5), End: at(15), Shared: true})
	if o := c.Overlaps(); len(o) != 0 {
		t.Fatalf("two readers reported: %v", o)
	}
	c.Record(Window{Holder: 2, Key: "k", Token: "w", Acquired: at(12), End: at(20)})
	o := c.Overlaps()
	if len(o) != 1 || o[0].A.Token != "r1" || o[0].B.Token != "w" || o[0].By != 3*time.Millisecond {
		t.Fatalf("a writer within a read hold: %v", o)
	}
}
