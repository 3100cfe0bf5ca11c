package main

import (
	"context"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modrun/modrun"
	"github.com/modrun/modrun/internal/maptest"
	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const shipped = "../../models/tinystories-mod.gguf"

// viewerBin builds the viewer once per test run.
func viewerBin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "modrun-viewer")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// xvfbRun runs the viewer under xvfb-run (a fresh X server with Mesa's
// software OpenGL on a free display) and returns its exit status and
// output, or skips when there is no Xvfb or no OpenGL.
func xvfbRun(t *testing.T, bin string, env []string, args ...string) (int, string) {
	t.Helper()
	if _, err := exec.LookPath("xvfb-run"); err != nil {
		t.Skip("no xvfb-run (Debian: xvfb, xauth; make test installs them): the viewer needs an X display")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "xvfb-run", append([]string{"-a", "-s", "-screen 0 1280x800x24", bin}, args...)...)
	// On a timeout, kill xvfb-run's whole process group: Xvfb and the viewer too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	code := 0
	require.NoError(t, ctx.Err(), "the viewer did not finish in time: %s", out)
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	if strings.Contains(string(out), "cannot open a window") {
		t.Skipf("no OpenGL under Xvfb (Debian: libgl1-mesa-dri): %s", out)
	}
	return code, string(out)
}

func readPNG(t *testing.T, path string) image.Image {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err)
	return img
}

// colours counts the distinct colours of img: a blank frame has one.
func colours(img image.Image) int {
	seen := map[[3]uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			seen[[3]uint32{r, g, bl}] = true
		}
	}
	return len(seen)
}

// apiRun is the routing the embedding API gives for the same prompt and n.
func apiRun(t *testing.T, backend, prompt string, n int) ([]modrun.Token, modrun.Result) {
	t.Helper()
	m, err := modrun.Open(shipped, modrun.Options{Backend: backend})
	require.NoError(t, err)
	defer m.Close()
	var toks []modrun.Token
	res, err := m.NewSession().Generate(context.Background(), prompt, modrun.GenerateOptions{MaxTokens: n}, func(tk modrun.Token) error {
		toks = append(toks, tk)
		return nil
	})
	require.NoError(t, err)
	return toks, res
}

// TestViewerScreenshot runs the viewer under Xvfb with the shipped MoD
// model, as the README says, and checks its screenshot, read back from the
// OpenGL framebuffer: not blank, and the routing map's marked cells (read
// from the PNG at the frame's known geometry) equal to the session's
// routing for the same prompt and -n, whose column sums are the counts
// `modrun --stats` prints. On the CPU and, when there is one, on a Vulkan
// device (lavapipe here).
func TestViewerScreenshot(t *testing.T) {
	bin := viewerBin(t)
	backends := []string{modrun.BackendCPU}
	if vk.Load() == nil {
		backends = append(backends, modrun.BackendVulkan)
	}
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			shot := filepath.Join(t.TempDir(), "out.png")
			code, out := xvfbRun(t, bin, nil, "-m", shipped, "-p", "Once upon", "-n", "40", "--backend", backend, "--screenshot", shot)
			if backend == modrun.BackendVulkan && code != 0 && strings.Contains(out, "no Vulkan device") {
				t.Skipf("no Vulkan device: %s", out)
			}
			require.Equal(t, 0, code, out)
			img := readPNG(t, shot)
			assert.Greater(t, colours(img), 50, "not blank: text, panels and the map")

			want, res := apiRun(t, backend, "Once upon", 40)
			rows := len(res.Layers)
			require.Equal(t, 4, rows)
			size := img.Bounds().Size()
			l := layoutFor(size.X, size.Y, rows)
			first := firstColumn(len(want), l.mapCols)
			require.Zero(t, first, "43 tokens fit in a %d-pixel-wide map", size.X)
			got := maptest.Read(img, l.mapOrigin, mapScale, len(want), rows)
			assert.Equal(t, maptest.Marked(want, rows), got, "the map's marks are the session's routing")
			for j, s := range res.Layers {
				n := 0
				for i := range got {
					if got[i][j] {
						n++
					}
				}
				assert.Equal(t, s.Selected, n, "layer %d: marks = --stats count", s.Layer)
			}
			assert.Contains(t, out, "43 tokens on ")
		})
	}
}

// TestViewerBadCases: a model that fails to load (the message on stderr
// and in the window's screenshot, exit status 1); no Vulkan at all (the
// loader finds no driver: it runs on the CPU and says so); the window
// closed during generation (cancelled, the model closed; on Vulkan with
// the validation layer on, which reports any GPU object left at
// vkDestroyDevice).
func TestViewerBadCases(t *testing.T) {
	bin := viewerBin(t)

	shot := filepath.Join(t.TempDir(), "fail.png")
	missing := filepath.Join(t.TempDir(), "none.gguf")
	code, out := xvfbRun(t, bin, nil, "-m", missing, "--screenshot", shot)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "modrun-viewer: cannot load the model: ")
	assert.Contains(t, out, "none.gguf")
	assert.Greater(t, colours(readPNG(t, shot)), 10, "the window shows the message")

	shot = filepath.Join(t.TempDir(), "cpu.png")
	code, out = xvfbRun(t, bin, []string{"VK_ICD_FILENAMES=" + filepath.Join(t.TempDir(), "no-driver.json"), "VK_DRIVER_FILES=" + filepath.Join(t.TempDir(), "no-driver.json")},
		"-m", shipped, "-n", "5", "--screenshot", shot)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "running on the CPU")

	code, out = xvfbRun(t, bin, nil, "-m", shipped, "-n", "0", "--backend", "cpu", "--close-after", "5")
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "the window closed during generation: cancelled, model closed")

	if vk.Load() != nil || !vk.HasValidationLayer() {
		t.Skip("no Vulkan validation layer: the GPU leak check needs it")
	}
	code, out = xvfbRun(t, bin, []string{"VK_INSTANCE_LAYERS=VK_LAYER_KHRONOS_validation"},
		"-m", shipped, "-n", "0", "--backend", "vulkan", "--close-after", "5")
	if code != 0 && strings.Contains(out, "no Vulkan device") {
		t.Skipf("no Vulkan device: %s", out)
	}
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "the window closed during generation: cancelled, model closed")
	assert.NotContains(t, out, "Validation Error", "no GPU object left behind")
	assert.NotContains(t, out, "has not been destroyed")
}

// TestFrameWithoutWindow draws frames in Go alone: the layout holds the map
// where the tests read it, and the map scrolls to the newest tokens.
func TestFrameWithoutWindow(t *testing.T) {
	toks, _ := apiRun(t, modrun.BackendCPU, "Once upon", 120)
	p, err := newPainter()
	require.NoError(t, err)
	m, err := modrun.Open(shipped, modrun.Options{Backend: modrun.BackendCPU})
	require.NoError(t, err)
	info := m.Info()
	require.NoError(t, m.Close())
	v := view{Prompt: "Once upon", Tokens: toks, Info: info, Loaded: true, Done: true, Status: "done"}
	for _, w := range []int{960, 400} {
		img := p.frame(v, w, 540)
		l := layoutFor(w, 540, 4)
		first := firstColumn(len(toks), l.mapCols)
		if w == 400 {
			assert.Positive(t, first, "a narrow window shows the newest tokens")
		}
		assert.Equal(t, maptest.Marked(toks[first:], 4), maptest.Read(img, l.mapOrigin, mapScale, len(toks)-first, 4))
	}
	fatal := p.frame(view{Fatal: "cannot load the model: boom", Done: true}, 640, 480)
	assert.Greater(t, colours(fatal), 5)
}

// TestNoDisplay: without a display, or with one that does not answer, the
// viewer says so in one line naming xvfb-run and exits 1 (GLFW's Init only
// logged the failure, and the next call panicked).
func TestNoDisplay(t *testing.T) {
	bin := viewerBin(t)
	for _, display := range []string{"", ":87"} {
		for _, args := range [][]string{{"-m", shipped}, {"-m", shipped, "-p", "Once", "-n", "2", "--screenshot", filepath.Join(t.TempDir(), "out.png")}} {
			cmd := exec.Command(bin, args...)
			var env []string
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "DISPLAY=") && !strings.HasPrefix(kv, "WAYLAND_DISPLAY=") {
					env = append(env, kv)
				}
			}
			if display != "" {
				env = append(env, "DISPLAY="+display)
			}
			cmd.Env = env
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee, "DISPLAY=%q: %s", display, out)
			assert.Equal(t, 1, ee.ExitCode(), "DISPLAY=%q: %s", display, out)
			assert.Equal(t, 1, strings.Count(string(out), "\n"), "one line: %s", out)
			assert.True(t, strings.HasPrefix(string(out), "modrun-viewer: no display found ("), "%s", out)
			assert.Contains(t, string(out), "xvfb-run -a modrun-viewer")
		}
	}
}
