package vulkan

// The decode step: one token through the whole model, the forward
// recorder's step pass (forward.go), recorded once per runner, twice: with
// the logits' copy to r.logitsHost for Feed, and without it for
// FeedArgmax, which reads 4 bytes a token. Its inputs are r.tok and
// r.tokPos (host-written) and r.counts (GPU-kept); its outputs r.bestHost
// and r.logitsHost.
func (r *Runner) record() error {
	var err error
	if r.step, err = r.recordForward(stepPass(true)); err != nil {
		return err
	}
	if r.stepGreedy, err = r.recordForward(stepPass(false)); err != nil {
		return err
	}
	r.fetch = r.dev.NewRecorder() // the logits of a prefill's last row, for Feed
	r.fetch.Copy(r.act.logits, r.logitsHost, 0, 0, 4*uint64(r.c.NVocab))
	return r.fetch.Err()
}
