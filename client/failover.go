package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// Several servers that share one database (PostgreSQL) serve the same
// jobs, blobs and tokens, and a client may be given all of them, as one
// comma-separated base URL: "https://a:7400,https://b:7400". It sends
// each request to the server that answered last (the first at start)
// and moves on to the next when that one cannot be reached: the
// connection is refused or times out, so the request never arrived and
// sending it elsewhere is safe; a GET, which changes nothing, moves on
// after any failure of the connection, or when the server does not begin
// to answer within the failover time (WithFailoverAfter): a stopped or
// stalled server accepts connections but never answers. Each server's certificate is
// pinned on its own: by the cluster key's proof, or, with a fingerprint
// or a join token, the servers must share one certificate.

// splitURLs returns the URLs of a comma-separated list.
func splitURLs(s string) []string {
	var out []string
	for _, u := range strings.Split(s, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}

// newGroup returns a client of several servers.
func newGroup(urls []string, opts []Option) *Client {
	c := &Client{failAfter: DefaultFailoverAfter}
	for _, o := range opts {
		o(c)
	}
	c.group = make([]*Client, len(urls))
	for i, u := range urls {
		m := newOne(u, opts...)
		m.failAfter = c.failAfter
		// Connections to a member that do not come up within the
		// failover time fail, so that the request moves on; its
		// transport is its own, as the timeouts are.
		if t, ok := m.hc.Transport.(*http.Transport); ok {
			t = t.Clone()
			t.DialContext = (&net.Dialer{Timeout: c.failAfter, KeepAlive: 30 * time.Second}).DialContext
			t.TLSHandshakeTimeout = c.failAfter
			hc := *m.hc
			hc.Transport = t
			m.hc = &hc
		}
		c.group[i] = m
	}
	c.base = c.group[0].base
	return c
}

// notSent marks a failure before any of the request was sent (while
// learning the server's certificate): sending it elsewhere is safe.
type notSent struct{ error }

func (e notSent) Unwrap() error { return e.error }

// trackedBody is a request body that knows whether it was read: one
// never read (the connection failed first) can go to another server as
// it is.
type trackedBody struct {
	r    io.Reader
	read atomic.Bool
}

func (b *trackedBody) Read(p []byte) (int, error) {
	b.read.Store(true)
	return b.r.Read(p)
}

// errNoAnswer cancels a request to a member of a group that did not
// begin to answer within the failover time.
var errNoAnswer = errors.New("no answer")

// current returns the member of a group requests go to now.
func (c *Client) current() *Client { return c.group[int(c.cur.Load())%len(c.group)] }

// doGroup is do for a client of several servers.
func (c *Client) doGroup(ctx context.Context, op, method, path string, body io.Reader, contentType string, out any) (*http.Response, error) {
	if c.err != nil {
		return nil, fmt.Errorf("%s: %w", op, c.err)
	}
	start := int(c.cur.Load())
	var errs []string
	seeker, _ := body.(io.Seeker)
	var tb *trackedBody
	if body != nil && seeker == nil {
		tb = &trackedBody{r: body}
		body = tb
	}
	for i := range c.group {
		k := (start + i) % len(c.group)
		switch {
		case i == 0 || body == nil:
		case seeker != nil:
			// Send it again from its start.
			if _, err := seeker.Seek(0, io.SeekStart); err != nil {
				return nil, fmt.Errorf("%s: no server could be reached, and the request's body cannot be sent again (%v): %s", op, err, strings.Join(errs, "; "))
			}
		case tb.read.Load():
			// Read, so perhaps sent, and it cannot be read again.
			return nil, fmt.Errorf("%s: no server could be reached, and the request's body cannot be sent again: %s", op, strings.Join(errs, "; "))
		}
		resp, err := c.try(ctx, c.group[k], op, method, path, body, contentType, out)
		if err == nil || ctx.Err() != nil || !unreachable(err, method) {
			if err == nil {
				c.cur.Store(int32(k))
			}
			return resp, err
		}
		errs = append(errs, err.Error())
	}
	return nil, fmt.Errorf("%s: no server could be reached: %s", op, strings.Join(errs, "; "))
}

// try sends a request to the member m. A GET or HEAD that m does not
// begin to answer within the failover time is canceled with
// errNoAnswer; the answer's body, once it began, may take as long as it
// takes.
func (c *Client) try(ctx context.Context, m *Client, op, method, path string, body io.Reader, contentType string, out any) (*http.Response, error) {
	if method != http.MethodGet && method != http.MethodHead {
		return m.do(ctx, op, method, path, body, contentType, out)
	}
	actx, cancel := context.WithCancelCause(ctx)
	timer := time.AfterFunc(c.failAfter, func() { cancel(errNoAnswer) })
	resp, err := m.do(actx, op, method, path, body, contentType, out)
	timer.Stop()
	if err != nil && errors.Is(context.Cause(actx), errNoAnswer) && ctx.Err() == nil {
		cancel(nil)
		return resp, fmt.Errorf("%s: %s did not answer within %v (stalled or overloaded): %w", op, m.base, c.failAfter, errNoAnswer)
	}
	if err != nil || out != nil || resp == nil {
		cancel(nil) // nothing more to read
		return resp, err
	}
	resp.Body = &cancelOnClose{resp.Body, func() { cancel(nil) }}
	return resp, nil
}

// cancelOnClose ends a request's context when its answer's body is
// closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel func()
}

func (b *cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// unreachable reports whether err says the request did not reach the
// server, or, for a GET, that the connection failed: sending it to
// another server is safe.
func unreachable(err error, method string) bool {
	var ae *Error
	if errors.As(err, &ae) || errors.Is(err, ErrCertificate) {
		return false // the server answered, or is not one of ours
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return true
	}
	if errors.As(err, new(notSent)) {
		return true
	}
	// The TLS handshake comes before the request is written: a server
	// that did not finish it never saw the request.
	if strings.Contains(err.Error(), "TLS handshake timeout") {
		return true
	}
	return method == http.MethodGet || method == http.MethodHead
}
