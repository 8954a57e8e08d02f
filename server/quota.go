package server

import (
	"fmt"
	"io"
	"net/http"

	"github.com/braid-hpc/braid/store"
)

// Storage bounds: one upload (Config.MaxBlob, braid server --max-upload)
// and the bytes stored in all (Config.MaxData, --max-data).

// uploadSize answers an upload's announced length: 413 if it is larger
// than one upload may be, 507 if it does not fit in the data limit.
func (s *Server) uploadSize(what string, n int64) error {
	if n > s.cfg.MaxBlob {
		return kindf(errTooLarge, "%s of %s is larger than the server's limit of %s for one upload (braid server --max-upload); split the data into smaller parts or ask the operator to raise the limit",
			what, bytesText(n), bytesText(s.cfg.MaxBlob))
	}
	return s.room(what, max(n, 0))
}

// room fails with 507 unless n more bytes fit in the data limit.
func (s *Server) room(what string, n int64) error {
	if s.cfg.MaxData <= 0 {
		return nil
	}
	used := s.blobs.Used() + s.uploading.Load()
	if used+n <= s.cfg.MaxData && (n > 0 || used < s.cfg.MaxData) {
		return nil
	}
	need := ""
	if n > 0 {
		need = fmt.Sprintf(" and %s does not fit", bytesText(n))
	}
	return s.full(what, used, need)
}

// full is the 507 of an upload or job that does not fit: used bytes are
// stored (or being uploaded); need says what did not fit.
func (s *Server) full(what string, used int64, need string) error {
	return kindf(errStorage, "%s: the server stores %s of its %s limit (braid server --max-data)%s; delete blobs that are no longer needed (DELETE %s/ID), wait for old outputs to expire (braid server --retain), or ask the operator to raise the limit",
		what, bytesText(used), bytesText(s.cfg.MaxData), need, "/v1/blobs")
}

// storageError words a failure to store data because the disk is full.
func storageError(what string, err error) error {
	if store.IsNoSpace(err) {
		return withKind(errStorage, fmt.Errorf("%s: the server's data disk is full (%v); delete blobs that are no longer needed or ask the operator to free space", what, err))
	}
	return fmt.Errorf("%s: %w", what, err)
}

// quotaReader is an upload's body: it fails with 413 past MaxBlob and
// with 507 when the bytes stored and in upload pass MaxData.
type quotaReader struct {
	s    *Server
	r    io.Reader
	what string
	n    int64 // bytes read, counted in Server.uploading
	// err is the limit the upload passed, if it did.
	err error
}

func (s *Server) limitUpload(w http.ResponseWriter, r *http.Request, what string) *quotaReader {
	return &quotaReader{s: s, r: http.MaxBytesReader(w, r.Body, s.cfg.MaxBlob), what: what}
}

func (q *quotaReader) Read(p []byte) (int, error) {
	n, err := q.r.Read(p)
	if n > 0 {
		q.n += int64(n)
		q.s.uploading.Add(int64(n))
		if q.s.cfg.MaxData > 0 && q.s.blobs.Used()+q.s.uploading.Load() > q.s.cfg.MaxData {
			others := q.s.blobs.Used() + q.s.uploading.Load() - q.n
			q.err = q.s.full(q.what, others, fmt.Sprintf(" and this upload passed it after %s", bytesText(q.n)))
			return n, q.err
		}
	}
	if _, ok := err.(*http.MaxBytesError); ok {
		q.err = kindf(errTooLarge, "%s is larger than the server's limit of %s for one upload (braid server --max-upload); split the data into smaller parts or ask the operator to raise the limit",
			q.what, bytesText(q.s.cfg.MaxBlob))
		return n, q.err
	}
	return n, err
}

// done stops counting the upload's bytes as in progress.
func (q *quotaReader) done() { q.s.uploading.Add(-q.n); q.n = 0 }

// bytesText prints n with a binary unit: "16 GiB", "1.5 MiB", "512 B".
func bytesText(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	v := float64(n) / float64(div)
	if v == float64(int64(v)) {
		return fmt.Sprintf("%d %ciB", int64(v), "KMGTP"[exp])
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGTP"[exp])
}
