// Package sctpudp is the "sctp-udp" channel kind: real SCTP (RFC 9260)
// packets carried in UDP datagrams as in RFC 6951, one SCTP association per
// braid channel, built on github.com/pion/sctp.
//
//	dialer                                     listener
//	Stream 0 (net.Conn)  Stream k ...          Stream 0 (net.Conn)  Stream k ...
//	        \             /                            \             /
//	       Assoc (pion SCTP association)             Assoc, one per peer address
//	                |                                          |
//	       udpConn: connected UDP socket ----UDP---->  udp.Listener: one UDP socket,
//	                                                    demultiplexed by peer address
//
// The net.Conn that Dial and Listen's Accept return is SCTP stream 0 of the
// association, ordered and reliable. Write cuts the bytes into SCTP messages
// of at most Config.MaxMessageSize; Read serves the bytes of received
// messages in order and keeps what did not fit. Closing it shuts the whole
// association down (SHUTDOWN, so queued data is delivered first; ABORT after
// Config.Linger).
//
// More streams on the same association come from Stream.Assoc: OpenStream
// names a stream id (1..65535; 0 is the channel), AcceptStream returns the
// streams the peer used first. A stream may be unordered and partially
// reliable (RFC 3758 / RFC 7496); such a stream keeps message boundaries.
//
// The channel implements channel.Lanes with SCTP streams: OpenLane(id) is
// stream id, the same Stream for every call, and AcceptLane returns the
// streams the peer sent on first. A braid session puts each of its
// streams' data on its own lane, so a lost packet of one holds back only
// that lane, as SCTP intends. Lanes and OpenStream / AcceptStream do not
// mix on one association.
//
// UDP encapsulation follows RFC 6951: each side sends from the UDP port it
// receives on, and answers to the source port of the peer's datagrams, so
// no port needs configuring beyond the addresses handed to Dial and Listen.
// The SCTP ports inside the packets are 5000 on both sides (pion's fixed
// choice); a foreign peer must use SCTP port 5000 as well. Inbound SCTP
// packets must not exceed 8192 bytes (pion's receive limit), so Config.MTU
// is capped there and a foreign peer must keep its path MTU at or below it.
//
// pion refuses an INIT that carries parameters it does not parse, among
// them the IPv4/IPv6 Address and Supported Address Types parameters that
// usrsctp and kernel stacks always send. The conn under each association
// drops those parameters from an inbound INIT (and fixes its CRC32c) before
// pion sees it; over one UDP 4-tuple they carry nothing usable.
//
// pion retransmits to a peer that has gone silent without ever giving the
// association up (it has no Association.Max.Retrans limit); a reader
// notices such a peer by its read deadline, as braid's heartbeats do.
//
// Writes block by default the way pion's blocking mode does: the
// association takes one Write at a time, so a stream's Write also waits for
// other streams' queued data. Config.StreamSendBuffer gives each stream its
// own send buffer instead (pion's non-blocking writes), so that a stream of
// small messages is not held up by a busy one.
//
// The UDP socket's send buffer (Config.SendBuffer) is the only
// backpressure pion gets from a slow link: too large, and pion's bursts
// overflow the link's queue; too small, and the link idles whenever the
// sender waits for a core. By default a dialed association's socket holds
// about 10 ms of the rate it sends at (64 KiB to 1 MiB, sndbuf.go); a
// listener's, shared by its associations, 64 KiB.
//
// Since pion v1.12 an association negotiates RFC 8260 user message
// interleaving (I-DATA chunks) when both ends offer it, as two braid ends
// do: a large message on one stream is then sent chunk by chunk between
// other streams' messages, by a weighted fair queueing scheduler with equal
// weights, instead of ahead of them (Assoc.Interleaved tells). With a peer
// that does not offer it, such as usrsctp by default, plain DATA chunks
// are used. Loss detection is RACK-TLP (RFC 8985), always on in pion v1.12.
//
// Of paper 002's data-centre knobs, pion v1.12.1 offers only the
// fragmentation point, through the MTU: a chunk carries at most Config.MTU
// less 28 bytes with DATA, 32 with I-DATA (12 of common header, 16 or 20 of
// chunk header, rounded down to 4). It has no public knob for the others:
//
//   - No-delay: pion has no Nagle-style hold-back. Its write loop sends
//     whatever the congestion and receive windows allow as soon as a Write
//     queues data, bundling queued chunks into MTU-sized packets; sending
//     is always no-delay, so there is no NoDelay option.
//   - Delayed SACK / SACK frequency: fixed. The first DATA packet after an
//     idle spell starts a 200 ms timer (ackInterval, ack_timer.go) and the
//     next one sends the SACK at once, so a SACK goes every second packet
//     or after 200 ms; a gap in the TSNs, or a chunk with the I bit, is
//     acknowledged at once. The
//     association's ackMode (ackModeNoDelay, ackModeAlwaysDelay) is
//     unexported, "for testing".
//   - Maximum burst: none in normal sending, which the congestion and
//     receive windows alone bound. Only during tail-loss recovery does pion
//     limit bursts, to constants: tlrBurstDefaultFirstRTT (4 MTUs) and
//     tlrBurstDefaultLaterRTT (2 MTUs) in association.go.
//
// What it does offer braid exposes: MTU, MaxMessageSize, the advertised
// window (MaxReceiveBuffer), the UDP socket buffers (SendBuffer,
// ReceiveBuffer), per-stream send buffers (StreamSendBuffer), zero
// checksum (ZeroChecksum) and the RTO cap (RTOMax). docs/sctp.md sets them
// beside the kernel's.
//
// The MTU comes from the kernel's route to the peer unless Config.MTU says
// otherwise: 8192 on loopback, where pion's cost per packet dominates.
package sctpudp
