package forge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/convergehq/converge"
)

// Reporter posts commit statuses to a forge.
type Reporter interface {
	// Report makes st the forge's status of context st.Context on commit
	// sha, unless the forge already shows that state and description.
	Report(ctx context.Context, sha string, st converge.CommitStatus) error
}

// MaxDescription is the longest description, in characters, a forge is
// sent; GitHub refuses longer ones with 422.
const MaxDescription = 140

// ErrState is returned when a status's state is not one the forge
// accepts.
var ErrState = errors.New("state not accepted by the forge")

// StatusError is returned when the forge answers a request with a status
// code other than 2xx.
type StatusError struct {
	Method string
	URL    string
	Code   int
	// Message is the start of the response body.
	Message string
}

func (e *StatusError) Error() string {
	msg := strings.TrimSpace(e.Message)
	if msg == "" {
		msg = http.StatusText(e.Code)
	}
	return fmt.Sprintf("%s %s: %d %s", e.Method, e.URL, e.Code, msg)
}

// Temporary reports whether the same request may succeed later: on 5xx
// and 429 Too Many Requests.
func (e *StatusError) Temporary() bool {
	return e.Code >= 500 || e.Code == http.StatusTooManyRequests
}

// Permanent reports whether err is a refusal that retrying the same
// status cannot fix (a 4xx other than 429, a state the forge does not
// accept, a malformed URL). Network errors, 5xx and 429 are not permanent.
func Permanent(err error) bool {
	var se *StatusError
	if errors.As(err, &se) {
		return !se.Temporary()
	}
	var bad badRequest
	return errors.Is(err, ErrState) || errors.As(err, &bad)
}

// badRequest is a request that could not be made (a malformed URL): no
// retry can fix it.
type badRequest struct{ err error }

func (e badRequest) Error() string { return e.err.Error() }
func (e badRequest) Unwrap() error { return e.err }

// Option configures a reporter.
type Option func(*client)

// WithHTTPClient makes the reporter send its requests through hc.
func WithHTTPClient(hc *http.Client) Option { return func(c *client) { c.http = hc } }

// WithRetry sets how many times a request is tried (at least 1) and the
// backoff: base doubles after each failure up to max, with jitter. The
// default is 5 attempts, 500 ms doubling up to 30 s.
func WithRetry(attempts int, base, max time.Duration) Option {
	return func(c *client) {
		c.attempts, c.base, c.max = max1(attempts), base, max
	}
}

func max1(n int) int {
	if n < 1 {
		return 1
	}
	return n
}

// client sends JSON requests with retries.
type client struct {
	http     *http.Client
	header   http.Header
	attempts int
	base     time.Duration
	max      time.Duration
}

func newClient(header http.Header, opts []Option) client {
	c := client{http: &http.Client{Timeout: 30 * time.Second}, header: header,
		attempts: 5, base: 500 * time.Millisecond, max: 30 * time.Second}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// do sends body (nil: none) as JSON and decodes a 2xx answer into out
// (nil: discarded), retrying network errors, 5xx and 429 with backoff.
func (c *client) do(ctx context.Context, method, url string, body, out any) error {
	var payload []byte
	if body != nil {
		var err error
		if payload, err = json.Marshal(body); err != nil {
			return fmt.Errorf("encode %s %s: %w", method, url, err)
		}
	}
	for attempt := 1; ; attempt++ {
		wait, err := c.once(ctx, method, url, payload, out)
		if err == nil {
			return nil
		}
		if Permanent(err) || ctx.Err() != nil || attempt >= c.attempts {
			return err
		}
		if wait == 0 {
			wait = c.backoff(attempt)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// backoff returns the wait after the attempt-th failure: base·2^(n-1),
// capped at max, with up to 20% jitter.
func (c *client) backoff(attempt int) time.Duration {
	d := c.base
	for i := 1; i < attempt && d < c.max; i++ {
		d *= 2
	}
	d = min(d, c.max)
	if d > 0 {
		d += rand.N(d/5 + 1)
	}
	return d
}

// once sends one request; wait is the server's Retry-After, if any
// (capped at the maximum backoff).
func (c *client) once(ctx context.Context, method, url string, payload []byte, out any) (wait time.Duration, err error) {
	var rd io.Reader
	if payload != nil {
		rd = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, badRequest{fmt.Errorf("%s %s: %w", method, url, err)}
	}
	for k, v := range c.header {
		req.Header[k] = v
	}
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, err // *url.Error names method and URL
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return 0, fmt.Errorf("%s %s: read answer: %w", method, url, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		if s, perr := strconv.Atoi(resp.Header.Get("Retry-After")); perr == nil && s > 0 {
			wait = min(time.Duration(s)*time.Second, c.max)
		}
		return wait, &StatusError{Method: method, URL: url, Code: resp.StatusCode, Message: truncate(string(b), 200)}
	}
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			return 0, fmt.Errorf("%s %s: decode answer: %w", method, url, err)
		}
	}
	return 0, nil
}

// truncate cuts s to at most n characters, the last being "…" when cut.
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// Target returns st with its target URL pointing at the revision's row
// on the status site siteURL, when siteURL is set and st has none.
func Target(siteURL, hash string, st converge.CommitStatus) converge.CommitStatus {
	if st.TargetURL == "" && siteURL != "" {
		st.TargetURL = strings.TrimRight(siteURL, "/") + "/#rev-" + hash
	}
	return st
}
