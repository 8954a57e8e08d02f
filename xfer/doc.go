// Package xfer copies files over one braid session, each file on its own
// stream, as braid send and braid recv do: the sender announces the file's
// base name, size and permission bits, sends the content and its SHA-256;
// the receiver writes a temporary file in its directory, checks the
// checksum, fsyncs and renames the file into place, and answers with a
// verdict. A file that fails leaves nothing behind under its name.
//
//	sess, _ := transport.Dial(ctx, paths, cfg)
//	f := &xfer.File{Path: "data.bin", Name: "data.bin"}
//	err := xfer.Send(ctx, sess, f, nil)
//
//	r := &xfer.Receiver{Dir: "/data/in", Done: func(res xfer.Result) { ... }}
//	r.Serve(ctx, accepted, nil)
//
// The wire protocol is in proto.go.
package xfer
