// Package client talks to a braid server's control API: upload and
// download blobs, submit jobs and follow them, list workers and jobs.
// Workers use it to register and send heartbeats.
//
//	c := client.New("https://10.0.0.1:7400", client.WithKey(key))
//	id, err := c.Put(ctx, file)
//	job, err := c.Submit(ctx, api.JobRequest{Op: "blur", Input: id, Tile: api.Tile{W: 256, H: 256}})
//	job, err = c.Wait(ctx, job.Job, nil)
//	err = c.Get(ctx, job.Output, out)
//
// The client speaks HTTPS and pins the server's certificate before it
// sends a credential: by fingerprint (WithFingerprint, or a join token
// given to WithToken) or, with the cluster key, by the server's proof of
// the key for its certificate (see docs/security.md). WithInsecureHTTP
// talks plain HTTP to a server started with --insecure-http.
//
// Errors from the server are *Error values carrying its HTTP status and
// message; errors.Is(err, ErrNotFound) and the other sentinels test the
// status. Package client imports nothing of braid but api.
package client
