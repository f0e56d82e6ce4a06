#!/usr/bin/env bash
# Structure figures of the core module, for before/after comparisons of a
# redesign. Prints, per core package: non-test Go lines, exported names
# (top-level, from `go doc -short`, plus exported methods), and the
# synchronisation primitives declared (struct fields and variables of a
# sync or sync/atomic type, or a channel made with make(chan ...)); then
# the places that classify a node's reply, the packages the shipped
# command links, and the indirect lines of the root go.mod.
#
#   scripts/metrics.sh
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=$(go list -f '{{.Dir}}' ./... | sed "s|^$PWD/||" | grep -v '^integration\|^bench' || true)
printf '%-22s %6s %8s %6s\n' package lines exported sync
for d in $pkgs; do
	files=$(ls "$d"/*.go 2>/dev/null | grep -v '_test\.go$' || true)
	[ -n "$files" ] || continue
	lines=$(cat $files | wc -l)
	top=$(go doc -short "./$d" 2>/dev/null | grep -c . || true)
	methods=$( (grep -hE '^func \([^)]*\) [A-Z]' $files || true) | wc -l)
	syncs=$( (grep -hE '^\s+\w+(, \w+)*\s+\*?(sync\.[A-Z]\w*|atomic\.[A-Z]\w*)\b|make\(chan ' $files || true) | wc -l)
	printf '%-22s %6d %8d %6d\n' "$d" "$lines" "$((top + methods))" "$syncs"
done

echo
echo "reply classification (switches or comparisons on node statuses, non-test):"
grep -nE 'node\.(Done|Taken|Absent|Unknown)\b|\.Answered\(\)' $(ls redlock/*.go quorum/*.go internal/*/*.go 2>/dev/null | grep -v _test.go) \
	| grep -vE '^\S+:\s*//' | awk -F: '{print "  " $1 ":" $2}' | sort -u | tee /tmp/metrics-class.$$ | wc -l | sed 's/^/  lines: /'
rm -f /tmp/metrics-class.$$

echo
printf 'go list -deps ./cmd/redlock: %s packages\n' "$(go list -deps ./cmd/redlock | wc -l)"
printf 'testcontainers or toxiproxy among them: %s\n' "$(go list -deps ./cmd/redlock | grep -cE 'testcontainers|toxiproxy' || true)"
printf 'indirect lines in go.mod: %s\n' "$(grep -c '// indirect' go.mod || true)"
