package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	gosync "sync"
	"syscall"
	"testing"
	"time"
)

// chromiumBin returns the path of a Chromium binary, or skips the test.
func chromiumBin(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("chromium is absent from PATH (Debian package chromium; .ci/run installs it)")
	return ""
}

// browser is headless Chromium driven over the DevTools protocol on a
// pipe (--remote-debugging-pipe: it reads commands on fd 3 and writes
// replies and events on fd 4, each message NUL-terminated), so a test
// can click and type in real pages without a websocket client.
type browser struct {
	cmd *exec.Cmd
	w   *os.File

	mu      gosync.Mutex
	next    int
	waiting map[int]chan cdpReply
	done    chan struct{}
}

type cdpReply struct {
	ID     int             `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// startBrowser starts Chromium; it stops when the test ends.
func startBrowser(t *testing.T) *browser {
	t.Helper()
	bin := chromiumBin(t)
	toChrome, ourW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	ourR, fromChrome, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	// The profile is removed after every Chromium process is gone (its
	// helpers outlive the browser process by a moment): not t.TempDir,
	// whose cleanup would race them.
	profile, err := os.MkdirTemp("", "converge-cdp-")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
		"--disable-background-timer-throttling", "--disable-renderer-backgrounding", "--disable-backgrounding-occluded-windows",
		"--remote-debugging-pipe", "--user-data-dir="+profile, "about:blank")
	cmd.ExtraFiles = []*os.File{toChrome, fromChrome} // fds 3 and 4
	// Its own process group, so the cleanup ends the helpers too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	toChrome.Close()
	fromChrome.Close()
	b := &browser{cmd: cmd, w: ourW, waiting: map[int]chan cdpReply{}, done: make(chan struct{})}
	go b.read(ourR)
	t.Cleanup(func() {
		ourW.Close()
		cancel()
		_ = cmd.Wait()
		ourR.Close()
		for try := 0; ; try++ {
			err := os.RemoveAll(profile)
			if err == nil || try == 20 {
				if err != nil {
					t.Logf("chromium profile %s left behind: %v", profile, err)
				}
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	return b
}

func (b *browser) read(r *os.File) {
	defer close(b.done)
	br := bufio.NewReaderSize(r, 1<<20)
	for {
		msg, err := br.ReadBytes(0)
		if err != nil {
			return
		}
		var rep cdpReply
		if json.Unmarshal(msg[:len(msg)-1], &rep) != nil || rep.ID == 0 {
			continue // an event
		}
		b.mu.Lock()
		ch := b.waiting[rep.ID]
		delete(b.waiting, rep.ID)
		b.mu.Unlock()
		if ch != nil {
			ch <- rep
		}
	}
}

// call sends a command (to a page's session, or the browser when session
// is "") and decodes its result into out.
func (b *browser) call(session, method string, params, out any) error {
	b.mu.Lock()
	b.next++
	id := b.next
	ch := make(chan cdpReply, 1)
	b.waiting[id] = ch
	b.mu.Unlock()
	msg := map[string]any{"id": id, "method": method, "params": params}
	if session != "" {
		msg["sessionId"] = session
	}
	data, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	if _, err := b.w.Write(append(data, 0)); err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	select {
	case rep := <-ch:
		if rep.Error != nil {
			return fmt.Errorf("%s: %s", method, rep.Error.Message)
		}
		if out != nil {
			return json.Unmarshal(rep.Result, out)
		}
		return nil
	case <-b.done:
		return fmt.Errorf("%s: chromium exited", method)
	case <-time.After(60 * time.Second):
		return fmt.Errorf("%s: no reply in a minute", method)
	}
}

// open opens url in a new tab and returns the tab's session.
func (b *browser) open(t *testing.T, url string) string {
	t.Helper()
	var tgt struct {
		TargetID string `json:"targetId"`
	}
	if err := b.call("", "Target.createTarget", map[string]any{"url": url}, &tgt); err != nil {
		t.Fatal(err)
	}
	var att struct {
		SessionID string `json:"sessionId"`
	}
	if err := b.call("", "Target.attachToTarget", map[string]any{"targetId": tgt.TargetID, "flatten": true}, &att); err != nil {
		t.Fatal(err)
	}
	return att.SessionID
}

// eval evaluates expr in the tab and decodes its value into out.
func (b *browser) eval(session, expr string, out any) error {
	var res struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		Exception *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	if err := b.call(session, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true}, &res); err != nil {
		return err
	}
	if res.Exception != nil {
		return fmt.Errorf("%s: %s %s", expr, res.Exception.Text, res.Exception.Exception.Description)
	}
	if out != nil && len(res.Result.Value) > 0 {
		return json.Unmarshal(res.Result.Value, out)
	}
	return nil
}

// screenshot writes a PNG of the tab to path.
func (b *browser) screenshot(t *testing.T, session, path string) {
	t.Helper()
	var shot struct {
		Data []byte `json:"data"` // base64 in JSON
	}
	if err := b.call(session, "Page.captureScreenshot", map[string]any{"format": "png"}, &shot); err != nil {
		t.Fatal(err)
	}
	if len(shot.Data) < 1000 {
		t.Fatalf("screenshot of %d bytes", len(shot.Data))
	}
	if err := os.WriteFile(path, shot.Data, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// until evaluates the boolean expr in the tab every 20ms until it holds,
// for up to a minute.
func (b *browser) until(t *testing.T, session, what, expr string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; {
		var ok bool
		err := b.eval(session, expr, &ok)
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s (last error: %v)", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
