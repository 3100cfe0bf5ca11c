//go:build race

package bench

// raceEnabled: this test binary runs under the race detector (CI's
// `go test -race`), where a model's open costs about twice as much; tests
// that repeat one many times repeat it fewer times there.
const raceEnabled = true
