// Package relay puts faults between a client and a server in user space,
// so transport tests can exercise delay, loss, blackholes and resets on
// loopback without root.
//
// A relay listens on its own address (127.0.0.1:0 unless Config.Addr says
// otherwise) and forwards to a target; a test points the client at
// Relay.Addr() and changes the faults while traffic flows:
//
//	client ──► relay (delay, rate, loss, blackhole, cut) ──► target
//	       ◄──                                          ◄──
//
// TCP relays forward byte streams: each direction queues timestamped
// chunks, so added delay keeps the throughput and the byte order. A
// blackhole discards data silently and keeps connections open; Cut resets
// them. UDP relays forward datagrams with a per-direction drop
// probability from a seedable generator.
package relay
