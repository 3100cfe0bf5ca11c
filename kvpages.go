package modrun

// KVPages says how the parallel sessions' KV page pool (Options.Parallel
// above 1 or PrefixCache, on the CPU and Vulkan backends) is used: pages holding some session's keys
// and values, of total, each blockTokens tokens. Without a pool (sessions
// take turns on one contiguous cache) all three are 0. A server's metrics
// read it.
func (m *Model) KVPages() (inUse, total, blockTokens int) {
	return m.loop.Pages()
}

// Steps says how many forward passes the generation loop ran (a step of
// many sessions' rows counts once) and, of them, how many ran chained,
// several in one submission (the Vulkan backend's batched steps with
// Options.Parallel above 1 or PrefixCache: MODRUN_CHAIN; the runner's own
// chain, one session at a time, runs inside a step and counts none). A
// server's metrics read it.
func (m *Model) Steps() (steps, chained int) {
	st := m.loop.Stats()
	return st.Steps, st.ChainedSteps
}
