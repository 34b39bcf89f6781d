package keyspace

import (
	"reflect"
	"strings"
	"testing"
)

// crc16 is Redis Cluster's key hash (CRC16-CCITT, XMODEM).
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

// slot is the Redis Cluster slot of key: the hash of its {hash tag} when it
// has a non-empty one, else of the whole key.
func slot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return crc16(key) % 16384
}

func TestCRC16(t *testing.T) {
	t.Parallel()
	// The reference value of the Redis Cluster specification.
	if got := crc16("123456789"); got != 0x31C3 {
		t.Fatalf("crc16(123456789) = %#x, want 0x31c3", got)
	}
	if slot("{user1000}.following") != slot("{user1000}.followers") || slot("foo{}{bar}") != crc16("foo{}{bar}")%16384 {
		t.Fatal("hash tag rule")
	}
}

// TestOneSlot builds every key of a space, through every builder (found by
// reflection, so a new builder is covered without editing this test), with
// awkward ids (braces, slashes, colons), and requires them all in one
// Redis Cluster slot: the slot of the space's prefix.
func TestOneSlot(t *testing.T) {
	t.Parallel()
	ids := []string{"t/crash-1795325137-vwtqbotxae", "a{b}c", "}{", "x:y/z", ""}
	for _, ns := range []string{"", "spool", "prod", "t{x}y", "team/a"} {
		s := New(ns)
		v := reflect.ValueOf(s)
		want := slot(s.Prefix())
		var keys []string
		for i := 0; i < v.NumMethod(); i++ {
			m := v.Type().Method(i)
			ft := m.Type
			if ft.NumOut() != 1 || ft.Out(0).Kind() != reflect.String || m.Name == "Namespace" || m.Name == "Queue" {
				continue
			}
			switch ft.NumIn() {
			case 1: // the receiver only
				keys = append(keys, v.Method(i).Call(nil)[0].String())
			case 2:
				if ft.In(1).Kind() != reflect.String {
					t.Fatalf("builder %s takes %s", m.Name, ft.In(1))
				}
				for _, id := range ids {
					keys = append(keys, v.Method(i).Call([]reflect.Value{reflect.ValueOf(id)})[0].String())
				}
			}
		}
		if len(keys) < 20 {
			t.Fatalf("namespace %q: only %d keys built", ns, len(keys))
		}
		for _, k := range keys {
			if got := slot(k); got != want {
				t.Errorf("namespace %q: key %q in slot %d, the space's prefix in %d", ns, k, got, want)
			}
		}
	}
}
