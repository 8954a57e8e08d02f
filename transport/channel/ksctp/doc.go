// Package ksctp is the "sctp" channel kind: kernel SCTP (Linux lksctp), one
// one-to-one style association (SOCK_STREAM) per braid channel, driven by
// direct system calls and Go's network poller.
//
// Multi-homing: the local and remote strings that Kind.Dial and Kind.Listen
// take may each be a comma-separated list of addresses, all on one port:
//
//	Dial(ctx, "10.0.0.1,10.0.1.1", "10.0.0.2:9000,10.0.1.2")
//	Listen(ctx, "10.0.0.2:9000,10.0.1.2")
//	Listen(ctx, ":9000")                     // every local address
//
// Each entry is host or host:port (IPv6 in brackets when a port follows);
// a host name stands for all of its addresses. Entries that give a port
// must agree, and entries without one take it. A remote list needs a port
// somewhere; a local list may leave it out (the kernel picks one). The
// socket binds every local address (sctp_bindx, SCTP_SOCKOPT_BINDX_ADD)
// and connects to every remote one (sctp_connectx, SCTP_SOCKOPT_CONNECTX),
// so the association can fail over between paths by itself. The socket is
// IPv6 if any address is IPv6; IPv4 addresses may be mixed in.
//
// The socket is created non-blocking and handed to the runtime poller
// (os.NewFile, then net.FileConn / net.FileListener), so Read, Write,
// deadlines and Close behave as on a TCP net.Conn; errors name "tcp" as the
// network, since that is the only stream type package net knows.
//
// Conn carries one ordered byte stream on SCTP stream 0 and does not
// implement channel.Lanes yet: a braid session over kernel SCTP puts all of
// its streams on that one SCTP stream, as over TCP. Lanes here would send
// with sendmsg and an SCTP_SNDINFO control message naming the stream, and
// demultiplex recvmsg's SCTP_RCVINFO into one reader per stream.
//
// Config's knobs are the kernel's socket options for data-centre tuning
// (paper 002): SCTP_NODELAY (Config.Nagle), delayed SACK
// (SCTP_DELAYED_SACK: SACKDelay, SACKFreq), SCTP_MAX_BURST (MaxBurst), the
// fragmentation point SCTP_MAXSEG (MaxSeg), SCTP_RTOINFO (RTOInitial,
// RTOMin, RTOMax) and SO_SNDBUF / SO_RCVBUF. They are set on the socket
// before it connects or listens, so every association, dialed or accepted,
// starts with them; docs/sctp.md says what each does.
//
// Kernel SCTP may be missing (module not loaded, or a container without
// it): socket(IPPROTO_SCTP) then fails, and Dial and Listen return an error
// that wraps ErrUnavailable. Available reports it up front.
package ksctp
