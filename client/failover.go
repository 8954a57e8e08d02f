package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
)

// Several servers that share one database (PostgreSQL) serve the same
// jobs, blobs and tokens, and a client may be given all of them, as one
// comma-separated base URL: "https://a:7400,https://b:7400". It sends
// each request to the server that answered last (the first at start)
// and moves on to the next when that one cannot be reached: the
// connection is refused or times out, so the request never arrived and
// sending it elsewhere is safe; a GET, which changes nothing, moves on
// after any failure of the connection. Each server's certificate is
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
	c := &Client{}
	for _, o := range opts {
		o(c)
	}
	c.group = make([]*Client, len(urls))
	for i, u := range urls {
		c.group[i] = newOne(u, opts...)
	}
	c.base = c.group[0].base
	return c
}

// current returns the member of a group requests go to now.
func (c *Client) current() *Client { return c.group[int(c.cur.Load())%len(c.group)] }

// doGroup is do for a client of several servers.
func (c *Client) doGroup(ctx context.Context, op, method, path string, body io.Reader, contentType string, out any) (*http.Response, error) {
	if c.err != nil {
		return nil, fmt.Errorf("%s: %w", op, c.err)
	}
	start := int(c.cur.Load())
	var errs []string
	for i := range c.group {
		k := (start + i) % len(c.group)
		if i > 0 && body != nil {
			s, ok := body.(io.Seeker)
			if !ok {
				break // the body cannot be sent again
			}
			if _, err := s.Seek(0, io.SeekStart); err != nil {
				break
			}
		}
		resp, err := c.group[k].do(ctx, op, method, path, body, contentType, out)
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
	return method == http.MethodGet || method == http.MethodHead
}
