package node

import (
	"strconv"
)

// Redis Cluster places every key in one of Slots hash slots, and each
// master serves some of them. A lock's copy on one master of a cluster
// is kept in a slot that master serves: its keys (the lock key, its
// queue, its fence counter, its record and tombstones, all named after
// the lock key) start with one hash tag, "{tag}", whose slot is the
// master's, so that every script's keys share one slot (see FollowSlot).

// Slots is the number of hash slots of a Redis Cluster.
const Slots = 16384

// Slot returns the hash slot of key as Redis Cluster computes it: CRC16
// (XMODEM) of the key, or of its hash tag (what lies between its first
// "{" and the first "}" after it, when that is not empty), mod Slots.
func Slot(key string) int {
	if i := indexByte(key, '{'); i >= 0 {
		if j := indexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key) % Slots)
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), Redis
// Cluster's key hash.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// SlotRange is a range of hash slots, First to Last included.
type SlotRange struct{ First, Last int }

// TagFor returns the shortest hash tag (base-36 digits: "0", "1", ...,
// "10", ...) whose slot lies in one of ranges, the first in that order;
// "" when ranges cover no slot. Every slot has such a tag of at most
// four digits.
func TagFor(ranges []SlotRange) string {
	in := func(s int) bool {
		for _, r := range ranges {
			if s >= r.First && s <= r.Last {
				return true
			}
		}
		return false
	}
	any := false
	for _, r := range ranges {
		any = any || r.First <= r.Last && r.Last >= 0 && r.First < Slots
	}
	if !any {
		return ""
	}
	for n := int64(0); n < 36*36*36*36; n++ {
		t := strconv.FormatInt(n, 36)
		if in(int(crc16(t) % Slots)) {
			return t
		}
	}
	return ""
}
