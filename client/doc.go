// Package client talks to a braid server's control API: upload and
// download blobs, submit jobs and follow them, list workers and jobs.
// Workers use it to register and send heartbeats.
//
//	c := client.New("http://10.0.0.1:7400", client.WithKey(key))
//	id, err := c.Put(ctx, file)
//	job, err := c.Submit(ctx, api.JobRequest{Op: "blur", Input: id, Tile: api.Tile{W: 256, H: 256}})
//	job, err = c.Wait(ctx, job.Job, nil)
//	err = c.Get(ctx, job.Output, out)
//
// Errors from the server are *Error values carrying its HTTP status and
// message; errors.Is(err, ErrNotFound) and the other sentinels test the
// status. Package client imports nothing of braid but api.
package client
