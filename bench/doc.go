// Package bench measures modrun: what `modrun bench` and `modrun
// perplexity --compare` run, apart from the library (engine) they measure.
//
//   - Benchmark times one model on one backend (prefill and decode rates,
//     the routed shares, the decode's memory traffic), after validating
//     the backend against the CPU reference (validate.go): a backend whose
//     logits no rounding of its path explains is never timed.
//   - Parallel times P sequences at once on a backend's scheduler, after
//     checking each against its run alone.
//   - ProbeBandwidth measures a device's read bandwidth, the yardstick of
//     a decode's effective rate.
//   - Compare scores a text with two scorers and compares their next-token
//     distributions (llama.cpp's --kl-divergence figures).
//
// The folder also holds the scripts that ran the recorded measurements and
// their results (results/).
package bench
