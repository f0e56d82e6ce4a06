package redlock

import (
	"errors"
	"testing"
)

// placeCopies: every master up to five, one fewer when even; WithCopies
// odd, at least 3, at most the masters; fewer than 3 masters refused.
func TestPlaceCopies(t *testing.T) {
	for _, tc := range []struct{ masters, copies, want int }{
		{3, 0, 3}, {4, 0, 3}, {5, 0, 5}, {6, 0, 5}, {9, 0, 5},
		{5, 3, 3}, {9, 7, 7}, {3, 3, 3},
		{2, 0, -1}, {1, 0, -1}, {5, 4, -1}, {5, 1, -1}, {3, 5, -1}, {5, -3, -1},
	} {
		c := config{copies: tc.copies}
		got, err := c.placeCopies(tc.masters)
		if tc.want < 0 {
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("%d masters, copies %d: want ErrInvalid, got %d, %v", tc.masters, tc.copies, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%d masters, copies %d: want %d, got %d, %v", tc.masters, tc.copies, tc.want, got, err)
		}
	}
}
