//go:build !race

package modrun_test

// raceEnabled: see race_on_test.go.
const raceEnabled = false
