package modrun

// KVPages says how the parallel sessions' KV page pool (Options.Parallel
// above 1 or PrefixCache, on the CPU and Vulkan backends) is used: pages holding some session's keys
// and values, of total, each blockTokens tokens. Without a pool (sessions
// take turns on one contiguous cache) all three are 0. A server's metrics
// read it.
func (m *Model) KVPages() (inUse, total, blockTokens int) {
	return m.loop.Pages()
}
