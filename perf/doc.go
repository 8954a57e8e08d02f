// Package perf is the measurement engine of braid perf: a client (Run)
// and a server (Server) that measure a braid session, or k plain TCP
// connections striped by hand (the baseline), between two hosts, in the
// way iperf3 measures TCP.
//
// Two modes: bulk, where the sender writes messages on parallel streams
// and the receiver counts what arrives for a fixed time from the first
// byte (Report.ThroughputMbps is receiver bytes over that time); and
// pingpong, where the client writes a message and the server echoes it,
// and Report.EffectiveMbps is the effective bandwidth of eq. 1 of
// Mohamed et al., "High-performance message striping over reliable
// transport protocols" (2006): EffectiveMbps(size, mean RTT).
//
// Each test yields braid's Report (per-path bytes, striping control
// messages, round-trip percentiles) and an IperfReport shaped like
// iperf3's -J output, so that scripts written for iperf3 read it.
//
//	srv := perf.NewServer(cfg)
//	go srv.Serve(ctx, ln, false)
//
//	rep, ip, err := perf.Run(ctx, &perf.Options{Paths: paths, Config: cfg,
//		Mode: "bulk", Size: 1 << 20, Seconds: 10, Streams: 4})
//
// The control protocol is in proto.go.
package perf
