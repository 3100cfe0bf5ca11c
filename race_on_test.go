//go:build race

package modrun_test

// raceEnabled: this test binary runs under the race detector (make test's
// `go test -race`), where every generation costs several times more; the
// sampling tests that make over a thousand generations take fewer seeds
// there and all of them without it (go test without -race).
const raceEnabled = true
