package node_test

import (
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/quorumlock/redlock/node"
)

// TestScriptKeysMatchTheirHeaders checks node.Scripts against the
// scripts' own contracts: each script's Keys is the number of KEYS its
// header documents, and its source uses no KEYS beyond them (a driver
// that passes Keys keys must give the script every key it reads).
func TestScriptKeysMatchTheirHeaders(t *testing.T) {
	keyDoc := regexp.MustCompile(`^-- KEYS\[(\d+)\]`)
	keyUse := regexp.MustCompile(`KEYS\[(\d+)\]`)
	s := reflect.ValueOf(node.LuaScripts())
	for i := range s.NumField() {
		name := s.Type().Field(i).Name
		sc := s.Field(i).Interface().(node.Script)
		documented := 0
		for _, line := range strings.Split(sc.Src, "\n") {
			if !strings.HasPrefix(line, "--") {
				break // the header is the leading comment block
			}
			if m := keyDoc.FindStringSubmatch(line); m != nil {
				n, _ := strconv.Atoi(m[1])
				documented = max(documented, n)
			}
		}
		if documented == 0 {
			t.Errorf("%s: its header documents no KEYS", name)
			continue
		}
		if sc.Keys != documented {
			t.Errorf("%s: Keys is %d, its header documents %d", name, sc.Keys, documented)
		}
		// The script's own code, libraries aside: they serve scripts of
		// more keys and read theirs only when called from one.
		main, _, _ := strings.Cut(sc.Src, "local function ")
		for _, m := range keyUse.FindAllStringSubmatch(main, -1) {
			if n, _ := strconv.Atoi(m[1]); n > sc.Keys {
				t.Errorf("%s: uses KEYS[%d], beyond its %d keys", name, n, sc.Keys)
			}
		}
	}
}
