// Package transport is braid's data plane: sessions between two hosts
// over k network paths, carrying independent ordered message streams.
//
//	host A                                        host B
//	  Stream 1 ─┐                              ┌─ Stream 1
//	  Stream 3 ─┼─ Session ══ path 0 (net 1) ══ Session ─┼─ Stream 3
//	  Stream 5 ─┘          ══ path 1 (net 2) ══          └─ Stream 5
//	                       ══ path 2 (net 3) ══
//
// A message is cut into segments (Config.SegmentSize). A segment is
// striped over every live path when that delivers it sooner than the best
// single path, judged from the paths' measured rates, backlogs and round
// trips (plan.go; Config.StripeThreshold fixes a size instead), with the
// Enhanced MuniSocket technique (package stripe): fragments carry no
// sequence number; each channel's receiver places them by the Start frame
// that preceded them and the channel's FIFO order. Shorter segments travel
// whole on the path chosen by Config.Policy. Path writers take the next
// frame only when the kernel can take more (TCP_NOTSENT_LOWAT), so a small
// message on one stream overtakes a large one on another within about one
// fragment, and faster paths take more fragments.
//
// Each channel proves the cluster key in a Noise handshake
// (Noise_NNpsk0_25519_AESGCM_SHA256, handshake.go) before any data is
// read, and everything it carries afterwards, on every lane, travels in
// AES-256-GCM records under that channel's fresh keys (secure.go): bytes
// altered, replayed, reordered or cut on the way fail with ErrIntegrity,
// and the channel is dropped like a failed path. Config.InsecurePlaintext
// turns the records off, to measure what they cost. The receiver
// acknowledges data frames per channel: large ones at once, small ones
// with the next frame it sends or within 2 ms (a small message is
// usually answered at once, and the answer carries the acknowledgement).
// A path is probed (a ping, whose echo gives its round trip) while it
// has data awaiting acknowledgement, and otherwise only once it has
// heard nothing for a quarter of Config.PathTimeout, so an idle session
// costs a probe every few seconds. When a
// path fails (reset, interface down, or silent past Config.PathTimeout)
// the frames it had not had acknowledged are sent again on the others, and
// the dialing side reconnects the path in the background. Duplicates are
// dropped by (stream, segment, fragment), so nothing is lost, duplicated or
// reordered within a stream.
//
// Lanes: over a channel kind that carries several independent ordered
// streams in one connection (sctp-udp and sctp: the streams of an SCTP
// association), each path's channel is split into Config.Lanes lanes.
// Lane 0 carries control frames; each braid stream's data, with the Start
// and End frames that steer its striped segments, goes on one of the
// others. A packet lost from one stream's data then delays only the
// streams sharing its lane, not the whole path. Each lane is FIFO, which
// is all Enhanced striping needs; frames are counted, acknowledged and
// failed over per lane. TCP and MPTCP channels have one lane.
//
// Per-stream flow control: the receiver grants each stream
// Config.StreamWindow bytes of unread data; a slow reader stalls only its
// own stream.
//
// # Files
//
//	session.go     Session: open/accept streams, Flush, Shutdown, Close, the
//	               monitor, statistics
//	stream.go      Stream: WriteMessage, ReadMessage, per-stream flow control
//	msgreader.go   MessageReader: one message of any size, segment by segment
//	sender.go      the sending side: queues of whole and striped segments,
//	               each path's writer (nextBatch, claim, writeLoop), copies
//	               of frames stuck on slow paths, acknowledgements received
//	plan.go        whole or striped, and the fragment size, per segment
//	receiver.go    the receiving side: each lane's reader, reassembly of
//	               segments, acknowledgements owed
//	path.go        a path: its channel's life (attach, pathDown, redial,
//	               heartbeat) and its rate and round-trip estimates
//	lane.go        lanes of channels that have them (SCTP streams)
//	plainreader.go the read buffer of plaintext channels (readv)
//	secure.go      AES-256-GCM records; handshake.go the Noise handshake
//	listener.go    Listener and Dial; bufpool.go pooled message buffers
//	config.go      Config; errors.go the errors callers can test for
//
// # Locks
//
// Every lock, in the order they are taken; a goroutine holding one takes
// only locks further down the list, never one above.
//
//  1. Stream.writeMu: one message at a time per stream (WriteMessage,
//     Close). Stream.readMu likewise for reads (ReadMessage, NextMessage).
//     A goroutine holds at most one stream's.
//  2. Session.mu: all session, path, lane and stream state marked
//     "guarded by s.mu", and the cond Session.work that path writers wait
//     on. Never held across a read or write of a channel, a handshake, a
//     dial or a large copy (ReadMessage joins segments after unlocking).
//  3. stripe.Segment's lock, taken inside Claim, Remove, Join and Unsent,
//     which are called with Session.mu held.
//
// path.wmu, held by whoever writes a path's channel (its writer, or a
// goroutine writing a directBatch: an acknowledgement from a channel's
// reader, when the writer is idle), is
// taken without s.mu, except by sendDirect, which holds s.mu and only
// tries it (TryLock), so it never waits with s.mu held. Frames collected
// under s.mu are written under wmu in the same order.
//
// Leaves, held alone and never while taking another: Listener.mu (the
// listener's sessions and pending channels; a session created under it
// starts without taking its own lock, and Session.closeWith calls
// Listener.forget after releasing Session.mu), rateLog.mu, and
// secureLanes.mu (the records of each lane). Channels are read by exactly
// one goroutine per lane and written by one goroutine at a time per path
// (the holder of path.wmu), so the record state of secureConn and the
// buffer of plainReader have no lock of their own.
package transport
