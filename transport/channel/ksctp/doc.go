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
// deadlines and Close behave as on a TCP net.Conn; errors that come from
// the socket name "tcp" as the network, since that is the only stream type
// package net knows, and those of the lanes below name "sctp".
//
// Lanes (channel.Lanes): Conn carries one ordered byte stream per SCTP
// stream of the association. Lane 0 is the Conn itself, on SCTP stream 0;
// OpenLane(k) is SCTP stream k. Each association asks for 65 streams each
// way (SCTP_INITMSG; transport.MaxLanes is 64) and reads what it got from
// SCTP_STATUS: OpenLane of an id the association cannot carry is an error.
// A lane's Write sends messages of at most 64 KiB with sendmsg and an
// SCTP_SNDINFO control message naming the stream; writes to different
// lanes may run at once (the kernel serializes them), writes to one lane
// keep their order.
//
// Reading: one demultiplexer goroutine per association reads every
// message with recvmsg, with SCTP_RECVRCVINFO on so that each piece comes
// with an SCTP_RCVINFO control message naming its stream (a message split
// by partial delivery comes as several pieces of one stream, the last
// with MSG_EOR), and appends it to that lane's buffer. A lane holds at
// most 1 MiB unread: past that the demultiplexer stops reading the socket
// until the lane's reader catches up, and the kernel's receive window
// holds the peer back. (A user that never reads a lane the peer sends on
// thus stalls the association; braid's session reads every lane.) The
// first data on a stream this side has not opened makes the lane
// available to AcceptLane, once. A message on a stream the association
// does not have, a piece of another stream inside a message, or control
// data that does not parse closes the association with an error saying
// which; every lane's Read returns it.
//
// The demultiplexer runs from the moment the association is set up, also
// when no lane is ever opened, so that a Read on the channel never races
// with a lane opening for data the peer already sent on another stream
// (a plain read would take it as stream 0's). Lane 0 therefore behaves as
// before, ordered bytes with deadlines, EOF after the peer's shutdown and
// net.ErrClosed after Close, at the cost of one copy per byte received.
// Deadlines are per lane; the socket's write deadline follows the earliest
// lane deadline still ahead (see lane.setWriteDeadline). Closing a lane is
// local: its Read and Write fail and what the peer sends on it is dropped.
// Closing the Conn ends the association and wakes every Read, Write and
// AcceptLane. Errors are *net.OpError; a lane's name the lane ("lane 3:
// i/o timeout").

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
